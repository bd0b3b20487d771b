-- The stream lease's fencing epoch: it grows by one each time the lease
-- passes to another owner, and a pump transaction checks it with FOR KEY
-- SHARE. Being part of a unique key, a change of epoch (a takeover) takes the
-- row's FOR UPDATE lock and so waits for a running batch to end, while the
-- owner's renewal (expires_at only) never waits behind its own pump.
ALTER TABLE msgx_lease ADD COLUMN IF NOT EXISTS epoch BIGINT NOT NULL DEFAULT 0;
ALTER TABLE msgx_lease ADD CONSTRAINT msgx_lease_name_epoch UNIQUE (name, epoch);
