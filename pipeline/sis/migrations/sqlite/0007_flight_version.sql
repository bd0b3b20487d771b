-- SIS flight versions (package pipeline/sis); see the PostgreSQL migration.
CREATE TABLE IF NOT EXISTS flight_version (
    flid           TEXT NOT NULL,
    version        BIGINT NOT NULL,
    status         TEXT NOT NULL,
    msg_stream     TEXT NOT NULL,
    msg_id         BIGINT NOT NULL,
    seqn           BIGINT NOT NULL,
    msg_type       TEXT NOT NULL,
    msg_styp       TEXT NOT NULL,
    sndr           TEXT NOT NULL,
    changes        TEXT NOT NULL,
    events         TEXT NOT NULL,
    recorded_at    INTEGER NOT NULL,
    PRIMARY KEY (flid, version)
);
CREATE INDEX IF NOT EXISTS flight_version_msg ON flight_version (msg_stream, msg_id);
