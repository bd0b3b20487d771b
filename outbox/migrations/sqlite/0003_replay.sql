-- See the PostgreSQL migration.
CREATE TABLE IF NOT EXISTS msgx_outbox_key_state (
    target        TEXT NOT NULL,
    partition_key TEXT NOT NULL,
    sent_id       INTEGER NOT NULL,
    PRIMARY KEY (target, partition_key)
);

CREATE TABLE IF NOT EXISTS msgx_outbox_replay (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    at        INTEGER NOT NULL,
    actor     TEXT NOT NULL,
    reason    TEXT NOT NULL,
    selector  TEXT NOT NULL,
    replayed  TEXT NOT NULL,
    covered   TEXT NOT NULL
);
