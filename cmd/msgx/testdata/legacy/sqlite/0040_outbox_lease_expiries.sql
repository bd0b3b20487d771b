-- A lease that ran out without a result (the relay holding the row stopped
-- or crashed) is counted apart from the event's own failed sends, under its
-- own, larger limit: a relay that crash-loops must not spend the attempts of
-- the healthy events it happened to hold. A claim that takes a row whose
-- lease is still set (expired: released and finished rows have none) counts
-- one; attempts keep counting every claim, so the event's own attempts are
-- attempts - lease_expiries.
ALTER TABLE msgx_outbox ADD COLUMN lease_expiries INTEGER NOT NULL DEFAULT 0;
