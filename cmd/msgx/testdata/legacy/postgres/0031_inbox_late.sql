-- Rows of a permanent gap that showed up in the mailbox after all: taken in
-- late (out of order) or refused, by the operator's choice; never dropped
-- without this record. The poller looks at gaps declared within the
-- retention period (the index on declared_at).
CREATE TABLE IF NOT EXISTS msgx_inbox_late (
    stream   TEXT COLLATE "C" NOT NULL,
    msg_id   BIGINT NOT NULL,
    gap_id   BIGINT NOT NULL,
    action   TEXT NOT NULL,
    found_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (stream, msg_id)
);
CREATE INDEX IF NOT EXISTS msgx_inbox_gap_declared ON msgx_inbox_gap (stream, declared_at);
