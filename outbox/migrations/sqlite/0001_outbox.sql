-- The transactional outbox (package outbox); see the PostgreSQL migration for
-- the design. Times are INTEGER Unix microseconds (see package store).
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
    dead_at         INTEGER
);
CREATE INDEX IF NOT EXISTS msgx_outbox_pending ON msgx_outbox (target, id) WHERE status = 'PENDING';
CREATE INDEX IF NOT EXISTS msgx_outbox_pending_key ON msgx_outbox (target, partition_key, id) WHERE status = 'PENDING';
CREATE INDEX IF NOT EXISTS msgx_outbox_dead ON msgx_outbox (target, id) WHERE status = 'DEAD';

CREATE TABLE IF NOT EXISTS msgx_outbox_sent (
    event_id      TEXT NOT NULL,
    id            INTEGER NOT NULL,
    target        TEXT NOT NULL,
    topic         TEXT NOT NULL,
    partition_key TEXT NOT NULL,
    event_type    TEXT NOT NULL,
    status        TEXT NOT NULL,
    attempts      INTEGER NOT NULL,
    last_error    TEXT,
    created_at    INTEGER NOT NULL,
    done_at       INTEGER NOT NULL,
    covered_by    INTEGER
);
CREATE INDEX IF NOT EXISTS msgx_outbox_sent_done ON msgx_outbox_sent (done_at);
