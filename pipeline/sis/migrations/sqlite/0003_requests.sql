-- SIS requests (package pipeline/sis); see the PostgreSQL migration.
CREATE TABLE IF NOT EXISTS sis_req_track (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    request        TEXT NOT NULL,
    answer_type    TEXT NOT NULL,
    params         TEXT NOT NULL,
    seqn           BIGINT NOT NULL,
    body           TEXT NOT NULL,
    status         TEXT NOT NULL,
    reason         TEXT,
    registered_at  INTEGER NOT NULL,
    sent_at        INTEGER,
    expires_at     INTEGER NOT NULL,
    finished_at    INTEGER,
    outbound_id    BIGINT,
    answer_msg_id  BIGINT
);
CREATE UNIQUE INDEX IF NOT EXISTS sis_req_track_open ON sis_req_track (answer_type)
    WHERE status IN ('REGISTERED', 'SENT', 'WAITING');

CREATE TABLE IF NOT EXISTS sis_seq (
    name   TEXT PRIMARY KEY,
    value  BIGINT NOT NULL
);
