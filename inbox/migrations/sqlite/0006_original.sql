-- The bytes of a message as it was received, when they are not what the
-- mailbox (a text column) could hold: a body in GBK, GB18030 or UTF-16 is
-- stored in the mailbox and processed as UTF-8, and kept here byte-exact.
CREATE TABLE IF NOT EXISTS msgx_inbox_original (
    stream      TEXT NOT NULL,
    msg_id      INTEGER NOT NULL,
    charset     TEXT NOT NULL,
    body        BLOB NOT NULL,
    received_at INTEGER NOT NULL,
    PRIMARY KEY (stream, msg_id)
);
