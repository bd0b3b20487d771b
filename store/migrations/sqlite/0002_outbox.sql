-- The transactional outbox (package outbox). Times are INTEGER Unix
-- microseconds (see package store).
CREATE TABLE IF NOT EXISTS msgx_outbox (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id        TEXT NOT NULL UNIQUE,
    target          TEXT NOT NULL,
    topic           TEXT NOT NULL,
    partition_key   TEXT NOT NULL DEFAULT '',
    event_type      TEXT NOT NULL DEFAULT 'UPSERT',
    payload         BLOB,
    headers         TEXT,
    created_at      INTEGER NOT NULL,
    status          TEXT NOT NULL DEFAULT 'PENDING',
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    locked_until    INTEGER,
    last_error      TEXT,
    done_at         INTEGER,
    covered_by      INTEGER
);
CREATE INDEX IF NOT EXISTS msgx_outbox_pending ON msgx_outbox (target, id) WHERE status = 'PENDING';
CREATE INDEX IF NOT EXISTS msgx_outbox_pending_key ON msgx_outbox (target, partition_key, id) WHERE status = 'PENDING';
CREATE INDEX IF NOT EXISTS msgx_outbox_done ON msgx_outbox (done_at) WHERE status IN ('SENT', 'COVERED');
CREATE INDEX IF NOT EXISTS msgx_outbox_dead ON msgx_outbox (target, id) WHERE status = 'DEAD';
