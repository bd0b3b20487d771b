-- SIS flight versions (package pipeline/sis): one row per version of a
-- flight, written in the transaction that made the version. It says which
-- message made it (the inbox stream and id, the META SEQN, TYPE, STYP and
-- SNDR), what changed (changes: the status, each scalar field and each
-- collection before and after) and the outbox events it produced (events).
-- The history sweep deletes a flight's versions with the flight.
CREATE TABLE IF NOT EXISTS flight_version (
    flid           TEXT COLLATE "C" NOT NULL,
    version        BIGINT NOT NULL,
    status         TEXT NOT NULL,
    msg_stream     TEXT NOT NULL,
    msg_id         BIGINT NOT NULL,
    seqn           BIGINT NOT NULL,
    msg_type       TEXT NOT NULL,
    msg_styp       TEXT NOT NULL,
    sndr           TEXT NOT NULL,
    changes        JSON NOT NULL,
    events         JSON NOT NULL,
    recorded_at    TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (flid, version)
);
CREATE INDEX IF NOT EXISTS flight_version_msg ON flight_version (msg_stream, msg_id);
