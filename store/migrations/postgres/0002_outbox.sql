-- The transactional outbox: events written in the business transaction and
-- relayed to brokers at-least-once (package outbox).
--
-- Columns the relay changes come last, so that the WAL record of an update
-- shares the row's unchanged prefix (payload included) with the old version.
-- There is deliberately no index on id: every lookup by id goes through a
-- partial index, so that the planner can never walk sent rows in id order,
-- and each row carries one index fewer.
CREATE TABLE IF NOT EXISTS msgx_outbox (
    event_id        TEXT PRIMARY KEY,
    -- Order of the events of one key (Enqueue serialises writers of a key, so
    -- ids of a key grow in commit order).
    id              BIGINT GENERATED ALWAYS AS IDENTITY,
    target          TEXT NOT NULL,
    topic           TEXT NOT NULL,
    partition_key   TEXT COLLATE "C" NOT NULL DEFAULT '',
    event_type      TEXT NOT NULL DEFAULT 'UPSERT',
    payload         BYTEA,
    headers         JSONB,
    created_at      TIMESTAMPTZ NOT NULL,
    -- PENDING -> SENT | COVERED (compacted into a newer event) | DEAD.
    status          TEXT NOT NULL DEFAULT 'PENDING',
    -- Delivery attempts started (a claim counts one).
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TIMESTAMPTZ NOT NULL,
    -- The lease of the relay that claimed the row; it also fences that relay's
    -- later updates.
    locked_until    TIMESTAMPTZ,
    last_error      TEXT,
    -- When the row left PENDING.
    done_at         TIMESTAMPTZ,
    -- The id of the event that was sent for this one (COVERED rows).
    covered_by      BIGINT
) WITH (
    -- Room on each page so that the claim's update (lease, attempts: no
    -- indexed column) stays a heap-only tuple update.
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02
);
-- Unordered claims and the lag (oldest pending) per target.
CREATE INDEX IF NOT EXISTS msgx_outbox_pending ON msgx_outbox (target, id) WHERE status = 'PENDING';
-- Per-key and compacted lanes: the head (and newest) pending event of each key.
CREATE INDEX IF NOT EXISTS msgx_outbox_pending_key ON msgx_outbox (target, partition_key, id) WHERE status = 'PENDING';
-- Retention: finished rows by age.
CREATE INDEX IF NOT EXISTS msgx_outbox_done ON msgx_outbox (done_at) WHERE status IN ('SENT', 'COVERED');
-- The dead-letter records per target.
CREATE INDEX IF NOT EXISTS msgx_outbox_dead ON msgx_outbox (target, id) WHERE status = 'DEAD';
