-- name: Enqueue
-- One message (SQLite runs in process: a statement per row is cheap).
-- Transport-id dedup: a message already in the inbox or in its archive is not enqueued again.
INSERT INTO msgx_inbox (stream, msg_id, payload, received_at, traceparent, tracestate)
SELECT ?1, ?2, ?3, ?4, NULLIF(?5, ''), NULLIF(?6, '')
WHERE NOT EXISTS (SELECT 1 FROM msgx_inbox_hst h WHERE h.stream = ?1 AND h.msg_id = ?2)
-- A message known already is left alone, except that a pending one taken in
-- without a trace context (by the mailbox poller, ahead of the HTTP ingress
-- that stored it) gets the ingress's.
ON CONFLICT (stream, msg_id) DO UPDATE SET traceparent = excluded.traceparent, tracestate = excluded.tracestate
WHERE msgx_inbox.traceparent IS NULL AND excluded.traceparent IS NOT NULL AND msgx_inbox.status = 'PENDING'

-- name: Unfinished
-- The head and the messages after it, never beyond the source watermark;
-- without a cursor the bound is ?4 (0 when a source keeps the watermark and
-- has not created it yet). The lower bound skips the index entries of
-- finished messages.
SELECT msg_id, status, attempts, next_attempt_at, processing_started_at, COALESCE(identity, ''), COALESCE(error_class, ''), payload,
       COALESCE(traceparent, ''), COALESCE(tracestate, '')
FROM msgx_inbox
WHERE stream = ?1 AND status IN ('PENDING', 'FAILED') AND msg_id >= ?3
  AND msg_id <= COALESCE((SELECT watermark FROM msgx_inbox_cursor WHERE stream = ?1), ?4)
ORDER BY msg_id
LIMIT ?2

-- name: Owner
SELECT msg_id FROM msgx_inbox_identity WHERE stream = ?1 AND identity = ?2

-- name: Bind
INSERT INTO msgx_inbox_identity (stream, identity, msg_id, bound_at) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (stream, identity) DO NOTHING

-- name: Settle
-- Moves an unfinished message to its next status; terminal rows never change.
UPDATE msgx_inbox SET
    status = ?3, error_class = ?4, reason = ?5,
    identity = COALESCE(?6, identity), kind = COALESCE(?7, kind),
    attempts = attempts + ?8, next_attempt_at = ?9,
    processing_started_at = COALESCE(processing_started_at, ?10),
    finished_at = ?11, backfill_next_at = ?12, backfilled_at = ?13
WHERE stream = ?1 AND msg_id = ?2 AND status IN ('PENDING', 'FAILED')

-- name: LogError
INSERT INTO msgx_inbox_error (stream, msg_id, attempt, error_class, reason, at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)

-- name: Get
SELECT msg_id, status, COALESCE(error_class, ''), COALESCE(reason, ''), COALESCE(identity, ''), COALESCE(kind, ''),
       attempts, next_attempt_at, processing_started_at, received_at, finished_at,
       backfill_next_at, backfill_attempts, COALESCE(backfill_error, ''), backfilled_at
FROM msgx_inbox WHERE stream = ?1 AND msg_id = ?2

-- name: Counts
SELECT status, COUNT(*) FROM msgx_inbox WHERE stream = ?1 GROUP BY status

-- name: Release
-- Unbinds an identity bound in a batch for a message it did not reach.
DELETE FROM msgx_inbox_identity WHERE stream = ?1 AND identity = ?2 AND msg_id = ?3

-- name: KeepOriginal
INSERT INTO msgx_inbox_original (stream, msg_id, charset, body, received_at) VALUES (?1, ?2, ?3, ?4, ?5)
ON CONFLICT (stream, msg_id) DO NOTHING

-- name: Original
SELECT charset, body FROM msgx_inbox_original WHERE stream = ?1 AND msg_id = ?2

-- name: NextID
-- The stream's next transport id, above every id it has ever had (the
-- archive's too) the first time.
INSERT INTO msgx_inbox_seq (stream, last_id)
VALUES (?1, max(COALESCE((SELECT max(msg_id) FROM msgx_inbox WHERE stream = ?1), 0), COALESCE((SELECT max(msg_id) FROM msgx_inbox_hst WHERE stream = ?1), 0)) + 1)
ON CONFLICT (stream) DO UPDATE SET last_id = last_id + 1
RETURNING last_id
