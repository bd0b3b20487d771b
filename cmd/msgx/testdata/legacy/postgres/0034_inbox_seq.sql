-- The last transport id handed out per stream, for sources that have no id of
-- their own (a broker listener on a stream without a mailbox). Taking the next
-- one locks the stream's row until the enqueue commits, so ids become visible
-- in increasing order and the pump never finds a new message behind its head.
CREATE TABLE IF NOT EXISTS msgx_inbox_seq (
    stream  TEXT COLLATE "C" PRIMARY KEY,
    last_id BIGINT NOT NULL
);
