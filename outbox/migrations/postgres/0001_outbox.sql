-- The transactional outbox (package outbox): events written in the business
-- transaction and relayed to brokers at-least-once.
--
-- msgx_outbox holds the work: PENDING events and the DEAD ones (the
-- dead-letter records, replayable). A sent event leaves it (DELETE, the
-- cheapest change PostgreSQL can make to a row: no new row version, no index
-- entry) for msgx_outbox_sent, a narrow append-only record without payload
-- that retention cleans up.
--
-- There is deliberately no index on id: every lookup by id goes through a
-- partial index of pending rows, so the planner never walks finished rows.
-- Columns the relay changes come last, so that the WAL record of an update
-- shares the row's unchanged prefix (payload included) with the old version.
-- Indexed text columns compare bytewise (COLLATE "C") whatever the
-- database's locale: cheaper index work, and the key order the relay walks
-- is the same on every server.
CREATE TABLE IF NOT EXISTS msgx_outbox (
    event_id        TEXT COLLATE "C" PRIMARY KEY,
    -- Order of the events of a key: Enqueue serialises the writers of a key,
    -- so the ids of a key grow in commit order.
    id              BIGINT GENERATED ALWAYS AS IDENTITY,
    target          TEXT COLLATE "C" NOT NULL,
    topic           TEXT NOT NULL,
    partition_key   TEXT COLLATE "C" NOT NULL DEFAULT '',
    event_type      TEXT NOT NULL DEFAULT 'UPSERT',
    payload         BYTEA,
    headers         JSONB,
    created_at      TIMESTAMPTZ NOT NULL,
    status          TEXT NOT NULL DEFAULT 'PENDING', -- PENDING | DEAD
    -- Delivery attempts started (a claim counts one).
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TIMESTAMPTZ NOT NULL,
    -- The lease of the relay that claimed the row; it also fences that
    -- relay's later updates.
    locked_until    TIMESTAMPTZ,
    last_error      TEXT,
    dead_at         TIMESTAMPTZ
) WITH (
    -- Room on every page for the claim's update (lease and attempts, no
    -- indexed column) to stay a heap-only tuple update: no index entries.
    fillfactor = 50,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_insert_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02
);
-- Unordered claims and the lag (oldest pending) per target.
CREATE INDEX IF NOT EXISTS msgx_outbox_pending ON msgx_outbox (target, id) WHERE status = 'PENDING';
-- Per-key and compacted lanes: the head (and newest) pending event of each key.
CREATE INDEX IF NOT EXISTS msgx_outbox_pending_key ON msgx_outbox (target, partition_key, id) WHERE status = 'PENDING';
-- The dead-letter records per target.
CREATE INDEX IF NOT EXISTS msgx_outbox_dead ON msgx_outbox (target, id) WHERE status = 'DEAD';

-- Finished events: SENT (confirmed by the broker) or COVERED (a compacted lane
-- sent the newer event covered_by of the same key instead). Kept for the
-- retention period.
CREATE TABLE IF NOT EXISTS msgx_outbox_sent (
    event_id      TEXT NOT NULL,
    id            BIGINT NOT NULL,
    target        TEXT NOT NULL,
    topic         TEXT NOT NULL,
    partition_key TEXT NOT NULL,
    event_type    TEXT NOT NULL,
    status        TEXT NOT NULL,
    attempts      INTEGER NOT NULL,
    last_error    TEXT,
    created_at    TIMESTAMPTZ NOT NULL,
    done_at       TIMESTAMPTZ NOT NULL,
    covered_by    BIGINT
);
-- Retention deletes by age; inserts land on the right edge of this index.
CREATE INDEX IF NOT EXISTS msgx_outbox_sent_done ON msgx_outbox_sent (done_at);
