-- name: ExpireOpenRequests
-- A new request of a kind supersedes the open one.
UPDATE sis_req_track SET status = 'EXPIRED', reason = ?2, finished_at = ?3
WHERE answer_type = ?1 AND status IN ('REGISTERED', 'SENT', 'WAITING')

-- name: NextSeq
INSERT INTO sis_seq (name, value) VALUES (?1, 1)
ON CONFLICT (name) DO UPDATE SET value = sis_seq.value + 1 RETURNING value

-- name: InsertRequest
INSERT INTO sis_req_track (request, answer_type, params, seqn, body, status, registered_at, expires_at)
VALUES (?1, ?2, ?3, ?4, ?5, 'REGISTERED', ?6, ?7) RETURNING id

-- name: MarkRequestSent
UPDATE sis_req_track SET status = 'SENT', sent_at = ?2, outbound_id = ?3 WHERE id = ?1 AND status = 'REGISTERED'

-- name: MarkRequestNotSent
UPDATE sis_req_track SET status = 'EXPIRED', reason = ?2, finished_at = ?3 WHERE id = ?1 AND status = 'REGISTERED'

-- name: MarkRequestWaiting
UPDATE sis_req_track SET status = 'WAITING' WHERE id = ?1 AND status = 'SENT'

-- name: ExpireDueRequests
-- Open requests whose time is up (REGISTERED ones too: their outbound insert
-- was never confirmed).
UPDATE sis_req_track SET status = 'EXPIRED', reason = 'timeout', finished_at = ?1
WHERE status IN ('REGISTERED', 'SENT', 'WAITING') AND expires_at <= ?1

-- name: SentRequests
SELECT id, outbound_id FROM sis_req_track WHERE status = 'SENT' AND outbound_id IS NOT NULL ORDER BY id

-- name: LatestRequest
-- The newest request a RESP of this type could answer, locked until the
-- RESP's transaction ends.
SELECT id, status, sent_at, expires_at FROM sis_req_track WHERE answer_type = ?1 ORDER BY id DESC LIMIT 1

-- name: MarkRequestDone
UPDATE sis_req_track SET status = 'DONE', finished_at = ?2, answer_msg_id = ?3, reason = ?4
WHERE id = ?1 AND status IN ('SENT', 'WAITING')

-- name: ListRequests
SELECT id, request, answer_type, params, seqn, body, status, reason, registered_at, sent_at, expires_at, finished_at, outbound_id, answer_msg_id FROM sis_req_track WHERE (?1 = '' OR status = ?1) AND (?2 = 0 OR id < ?2) ORDER BY id DESC LIMIT ?3
