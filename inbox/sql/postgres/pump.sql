-- name: Enqueue
-- Transport-id dedup: a message already in the inbox or in its archive is not enqueued again.
INSERT INTO msgx_inbox (stream, msg_id, payload, received_at, traceparent, tracestate)
SELECT $1, u.id, u.payload, $4, NULLIF(u.traceparent, ''), NULLIF(u.tracestate, '')
FROM unnest($2::bigint[], $3::bytea[], $5::text[], $6::text[]) AS u(id, payload, traceparent, tracestate)
-- The bounds keep the archive probe on the batch's key range: an anti join
-- would otherwise hash the stream's whole archive.
WHERE NOT EXISTS (SELECT 1 FROM msgx_inbox_hst h WHERE h.stream = $1 AND h.msg_id = u.id
    AND h.msg_id BETWEEN (SELECT min(i) FROM unnest($2::bigint[]) i) AND (SELECT max(i) FROM unnest($2::bigint[]) i))
-- A message known already is left alone, except that a pending one taken in
-- without a trace context (by the mailbox poller, ahead of the HTTP ingress
-- that stored it) gets the ingress's.
ON CONFLICT (stream, msg_id) DO UPDATE SET traceparent = EXCLUDED.traceparent, tracestate = EXCLUDED.tracestate
WHERE msgx_inbox.traceparent IS NULL AND EXCLUDED.traceparent IS NOT NULL AND msgx_inbox.status = 'PENDING'

-- name: Unfinished
-- The head and the messages after it, never beyond the source watermark;
-- without a cursor the bound is $4 (0 when a source keeps the watermark and
-- has not created it yet). The lower bound skips the index entries of
-- finished messages.
SELECT msg_id, status, attempts, next_attempt_at, processing_started_at, COALESCE(identity, ''), COALESCE(error_class, ''), payload,
       COALESCE(traceparent, ''), COALESCE(tracestate, '')
FROM msgx_inbox
WHERE stream = $1 AND status IN ('PENDING', 'FAILED') AND msg_id >= $3
  AND msg_id <= COALESCE((SELECT watermark FROM msgx_inbox_cursor WHERE stream = $1), $4)
ORDER BY msg_id
LIMIT $2

-- name: Owner
SELECT msg_id FROM msgx_inbox_identity WHERE stream = $1 AND identity = $2

-- name: Bind
INSERT INTO msgx_inbox_identity (stream, identity, msg_id, bound_at) VALUES ($1, $2, $3, $4)
ON CONFLICT (stream, identity) DO NOTHING

-- name: Settle
-- Moves an unfinished message to its next status; terminal rows never change.
UPDATE msgx_inbox SET
    status = $3, error_class = $4, reason = $5,
    identity = COALESCE($6, identity), kind = COALESCE($7, kind),
    attempts = attempts + $8, next_attempt_at = $9,
    processing_started_at = COALESCE(processing_started_at, $10),
    finished_at = $11, backfill_next_at = $12, backfilled_at = $13
WHERE stream = $1 AND msg_id = $2 AND status IN ('PENDING', 'FAILED')

-- name: BindFirst
-- Binds each identity of the list (in message order) to its first message
-- unless it is bound already; returns the new bindings.
INSERT INTO msgx_inbox_identity (stream, identity, msg_id, bound_at)
SELECT $1, u.identity, u.id, $4 FROM unnest($2::text[], $3::bigint[]) WITH ORDINALITY AS u(identity, id, ord)
ORDER BY u.ord
ON CONFLICT (stream, identity) DO NOTHING
RETURNING identity, msg_id

-- name: Owners
-- One primary-key lookup per identity, whatever plan the statistics suggest.
SELECT u.identity, i.msg_id FROM unnest($2::text[]) AS u(identity)
CROSS JOIN LATERAL (SELECT msg_id FROM msgx_inbox_identity WHERE stream = $1 AND identity = u.identity) AS i

-- name: SettleMany
-- The successful (SUCCEEDED/SKIPPED) messages of a batch in one statement.
UPDATE msgx_inbox m SET
    status = u.status, error_class = NULL, reason = NULLIF(u.reason, ''),
    identity = COALESCE(NULLIF(u.identity, ''), m.identity), kind = COALESCE(NULLIF(u.kind, ''), m.kind),
    attempts = m.attempts + 1, next_attempt_at = NULL,
    processing_started_at = COALESCE(m.processing_started_at, $7),
    finished_at = $7, backfill_next_at = $8, backfilled_at = $9
FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[]) AS u(id, status, reason, identity, kind)
-- Unfinished rows are the ones not finished; saying it so (rather than by
-- status) keeps the plan on the primary key whatever the statistics say, and
-- the bounds keep the scan on the batch's key range whatever plan is cached.
WHERE m.stream = $1 AND m.msg_id = ANY($2::bigint[]) AND m.msg_id = u.id AND m.finished_at IS NULL
  AND m.msg_id BETWEEN (SELECT min(i) FROM unnest($2::bigint[]) i) AND (SELECT max(i) FROM unnest($2::bigint[]) i)

-- name: LogError
INSERT INTO msgx_inbox_error (stream, msg_id, attempt, error_class, reason, at) VALUES ($1, $2, $3, $4, $5, $6)

-- name: Get
SELECT msg_id, status, COALESCE(error_class, ''), COALESCE(reason, ''), COALESCE(identity, ''), COALESCE(kind, ''),
       attempts, next_attempt_at, processing_started_at, received_at, finished_at,
       backfill_next_at, backfill_attempts, COALESCE(backfill_error, ''), backfilled_at
FROM msgx_inbox WHERE stream = $1 AND msg_id = $2

-- name: Counts
SELECT status, COUNT(*) FROM msgx_inbox WHERE stream = $1 GROUP BY status

-- name: Release
-- Unbinds identities bound in a batch for messages it did not reach.
DELETE FROM msgx_inbox_identity i
USING unnest($2::text[], $3::bigint[]) AS u(identity, id)
WHERE i.stream = $1 AND i.identity = u.identity AND i.msg_id = u.id

-- name: KeepOriginal
INSERT INTO msgx_inbox_original (stream, msg_id, charset, body, received_at) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (stream, msg_id) DO NOTHING

-- name: Original
SELECT charset, body FROM msgx_inbox_original WHERE stream = $1 AND msg_id = $2

-- name: NextID
-- The stream's next transport id, above every id it has ever had (the
-- archive's too) the first time; the row stays locked until the caller's
-- transaction ends, so ids commit in the order they are handed out.
INSERT INTO msgx_inbox_seq (stream, last_id)
VALUES ($1, GREATEST((SELECT max(msg_id) FROM msgx_inbox WHERE stream = $1), (SELECT max(msg_id) FROM msgx_inbox_hst WHERE stream = $1), 0) + 1)
ON CONFLICT (stream) DO UPDATE SET last_id = msgx_inbox_seq.last_id + 1
RETURNING last_id
