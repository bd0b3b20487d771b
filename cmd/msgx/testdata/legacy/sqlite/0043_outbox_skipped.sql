-- See the PostgreSQL migration.
ALTER TABLE msgx_outbox ADD COLUMN skipped_at INTEGER;
CREATE INDEX IF NOT EXISTS msgx_outbox_dead_key ON msgx_outbox (target, partition_key, id)
    WHERE status = 'DEAD' AND skipped_at IS NULL;
ALTER TABLE msgx_outbox_replay ADD COLUMN action TEXT NOT NULL DEFAULT 'replay';
