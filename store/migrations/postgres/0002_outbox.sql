-- The transactional outbox: events written in the business transaction and
-- relayed to brokers at-least-once.
CREATE TABLE IF NOT EXISTS msgx_outbox (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id        TEXT NOT NULL UNIQUE,
    target          TEXT NOT NULL,
    topic           TEXT NOT NULL,
    partition_key   TEXT NOT NULL DEFAULT '',
    event_type      TEXT NOT NULL DEFAULT 'UPSERT',
    payload         BYTEA,
    headers         JSONB,
    status          TEXT NOT NULL DEFAULT 'PENDING',
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TIMESTAMPTZ NOT NULL,
    locked_until    TIMESTAMPTZ,
    last_error      TEXT,
    created_at      TIMESTAMPTZ NOT NULL,
    sent_at         TIMESTAMPTZ
);
-- Claims read due PENDING rows of one target in id order.
CREATE INDEX IF NOT EXISTS msgx_outbox_pending ON msgx_outbox (target, id) WHERE status = 'PENDING';
