-- The last transport id handed out per stream, for sources that have no id of
-- their own (a broker listener on a stream without a mailbox).
CREATE TABLE IF NOT EXISTS msgx_inbox_seq (
    stream  TEXT PRIMARY KEY,
    last_id INTEGER NOT NULL
);
