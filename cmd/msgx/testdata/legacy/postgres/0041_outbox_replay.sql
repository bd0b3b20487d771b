-- Compaction never goes back in time: for every key of a compacted target,
-- the id of the newest event sent (written in the statement that records the
-- send). Replaying a DEAD event of a key whose newer state was already sent
-- records it as COVERED by that newer event instead of sending the older
-- state again. One row per key, kept (no retention: a key's state must be
-- known as long as an older event of it can be replayed).
CREATE TABLE IF NOT EXISTS msgx_outbox_key_state (
    target        TEXT COLLATE "C" NOT NULL,
    partition_key TEXT COLLATE "C" NOT NULL,
    sent_id       BIGINT NOT NULL,
    PRIMARY KEY (target, partition_key)
);

-- The audit of replays: who, when, what (as msgx_inbox_replay).
CREATE TABLE IF NOT EXISTS msgx_outbox_replay (
    id        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at        TIMESTAMPTZ NOT NULL,
    actor     TEXT NOT NULL,
    reason    TEXT NOT NULL,
    selector  TEXT NOT NULL,
    -- JSON arrays of event ids: returned to PENDING, and covered by a newer
    -- sent state of their key instead.
    replayed  TEXT NOT NULL,
    covered   TEXT NOT NULL
);
