-- SIS requests (package pipeline/sis): the RQFD / RQRD messages msgx sends
-- through the outbound mailbox and the RESP that answers each.
--
-- status: REGISTERED (recorded, not yet in the outbound mailbox), SENT (the
-- outbound insert is confirmed; sent_at is then), WAITING (the dispatcher
-- has sent it: COUTMSGS_DATE_SENT is set), DONE (a RESP matched it; the
-- message is answer_msg_id), EXPIRED (timed out, superseded, or not sent;
-- reason says which). At most one request per answer type is open.
CREATE TABLE IF NOT EXISTS sis_req_track (
    id             BIGSERIAL PRIMARY KEY,
    request        TEXT NOT NULL,
    answer_type    TEXT COLLATE "C" NOT NULL,
    params         JSON NOT NULL,
    seqn           BIGINT NOT NULL,
    body           TEXT NOT NULL,
    status         TEXT NOT NULL,
    reason         TEXT,
    registered_at  TIMESTAMPTZ NOT NULL,
    sent_at        TIMESTAMPTZ,
    expires_at     TIMESTAMPTZ NOT NULL,
    finished_at    TIMESTAMPTZ,
    outbound_id    BIGINT,
    answer_msg_id  BIGINT
);
CREATE UNIQUE INDEX IF NOT EXISTS sis_req_track_open ON sis_req_track (answer_type)
    WHERE status IN ('REGISTERED', 'SENT', 'WAITING');

-- Durable counters: the SEQN of the messages msgx sends.
CREATE TABLE IF NOT EXISTS sis_seq (
    name   TEXT PRIMARY KEY,
    value  BIGINT NOT NULL
);
