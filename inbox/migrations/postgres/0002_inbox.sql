-- The inbox (PROC_STATE): one row per received message of a stream, keyed by
-- the transport id (the mailbox id), processed in strict msg_id order.
CREATE TABLE IF NOT EXISTS msgx_inbox (
    stream                TEXT NOT NULL,
    msg_id                BIGINT NOT NULL,
    payload               BYTEA,
    -- The business identity decoded from the payload; the binding that makes
    -- it unique lives in msgx_inbox_identity (it survives archiving).
    identity              TEXT,
    kind                  TEXT,
    status                TEXT NOT NULL DEFAULT 'PENDING',
    error_class           TEXT,
    reason                TEXT,
    attempts              INTEGER NOT NULL DEFAULT 0,
    next_attempt_at       TIMESTAMPTZ,
    -- Set at the first processing attempt: the stable start of the head deadline.
    processing_started_at TIMESTAMPTZ,
    received_at           TIMESTAMPTZ NOT NULL,
    finished_at           TIMESTAMPTZ,
    -- Backfill intent: due time of the next write of the processed mark to the source.
    backfill_next_at      TIMESTAMPTZ,
    backfill_attempts     INTEGER NOT NULL DEFAULT 0,
    backfill_error        TEXT,
    backfilled_at         TIMESTAMPTZ,
    PRIMARY KEY (stream, msg_id)
);
-- The head is the smallest unfinished message.
CREATE INDEX IF NOT EXISTS msgx_inbox_unfinished ON msgx_inbox (stream, msg_id) WHERE status IN ('PENDING', 'FAILED');
CREATE INDEX IF NOT EXISTS msgx_inbox_backfill ON msgx_inbox (stream, backfill_next_at) WHERE backfill_next_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS msgx_inbox_failed ON msgx_inbox (stream, error_class) WHERE status IN ('FAILED', 'DEAD');

-- Business identity bindings: the first message that decoded an identity owns it.
CREATE TABLE IF NOT EXISTS msgx_inbox_identity (
    stream    TEXT NOT NULL,
    identity  TEXT NOT NULL,
    msg_id    BIGINT NOT NULL,
    bound_at  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (stream, identity)
);

-- Every recorded processing failure (the error history; replay keeps it).
CREATE TABLE IF NOT EXISTS msgx_inbox_error (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    stream      TEXT NOT NULL,
    msg_id      BIGINT NOT NULL,
    attempt     INTEGER NOT NULL,
    error_class TEXT NOT NULL,
    reason      TEXT NOT NULL,
    at          TIMESTAMPTZ NOT NULL
);
CREATE INDEX IF NOT EXISTS msgx_inbox_error_msg ON msgx_inbox_error (stream, msg_id);

-- The source watermark W of a stream (ID > W is still to be enqueued) and the
-- gap it is waiting for. The pump never processes beyond W.
CREATE TABLE IF NOT EXISTS msgx_inbox_cursor (
    stream      TEXT PRIMARY KEY,
    watermark   BIGINT NOT NULL,
    gap_from    BIGINT,
    gap_seen_at TIMESTAMPTZ,
    updated_at  TIMESTAMPTZ NOT NULL
);

-- Gaps declared permanent (skipped after max-commit-delay).
CREATE TABLE IF NOT EXISTS msgx_inbox_gap (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    stream        TEXT NOT NULL,
    from_id       BIGINT NOT NULL,
    to_id         BIGINT NOT NULL,
    first_seen_at TIMESTAMPTZ NOT NULL,
    declared_at   TIMESTAMPTZ NOT NULL
);

-- Audit of every replay: who, when, why, which ids.
CREATE TABLE IF NOT EXISTS msgx_inbox_replay (
    id        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    stream    TEXT NOT NULL,
    at        TIMESTAMPTZ NOT NULL,
    actor     TEXT NOT NULL,
    reason    TEXT NOT NULL,
    selector  TEXT NOT NULL,
    msg_ids   TEXT NOT NULL,
    count     INTEGER NOT NULL
);

-- Archived terminal rows (PROC_STATE_HST). Their identities stay bound.
CREATE TABLE IF NOT EXISTS msgx_inbox_hst (
    stream                TEXT NOT NULL,
    msg_id                BIGINT NOT NULL,
    payload               BYTEA,
    identity              TEXT,
    kind                  TEXT,
    status                TEXT NOT NULL,
    error_class           TEXT,
    reason                TEXT,
    attempts              INTEGER NOT NULL,
    processing_started_at TIMESTAMPTZ,
    received_at           TIMESTAMPTZ NOT NULL,
    finished_at           TIMESTAMPTZ,
    backfilled_at         TIMESTAMPTZ,
    archived_at           TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (stream, msg_id)
);
