-- A DEAD event of a per-key target holds its key: the key's later events
-- wait until an operator replays it (it is sent first, being the oldest) or
-- skips it. A skipped event stays DEAD, marked with when it was skipped
-- (the skip is audited in msgx_outbox_replay), and no longer holds its key.
ALTER TABLE msgx_outbox ADD COLUMN skipped_at TIMESTAMPTZ;
-- The per-key claim asks, for each key it visits, whether a DEAD event not
-- skipped is older than the key's head: one probe of this index, which holds
-- only the dead letters that hold their key (usually none).
CREATE INDEX IF NOT EXISTS msgx_outbox_dead_key ON msgx_outbox (target, partition_key, id)
    WHERE status = 'DEAD' AND skipped_at IS NULL;
-- The replay audit records skips too: action replay or skip (the ids skipped
-- are in replayed).
ALTER TABLE msgx_outbox_replay ADD COLUMN action TEXT NOT NULL DEFAULT 'replay';
