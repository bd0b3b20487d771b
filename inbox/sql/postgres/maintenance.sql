-- name: BackfillDue
-- Terminal messages whose processed mark is due, or overdue (received before $3).
SELECT msg_id, backfill_attempts FROM msgx_inbox
WHERE stream = $1 AND backfill_next_at IS NOT NULL AND status IN ('SUCCEEDED', 'SKIPPED', 'DEAD')
  AND (backfill_next_at <= $2 OR received_at <= $3)
ORDER BY backfill_next_at, msg_id
LIMIT $4

-- name: BackfillDone
-- The bounds keep the scan on the ids' key range whatever plan is cached: a
-- generic plan made while the table was small reads every row of the stream.
UPDATE msgx_inbox SET backfilled_at = $3, backfill_next_at = NULL, backfill_error = NULL
WHERE stream = $1 AND msg_id = ANY($2::bigint[]) AND msg_id BETWEEN (SELECT min(i) FROM unnest($2::bigint[]) i) AND (SELECT max(i) FROM unnest($2::bigint[]) i)
  AND status IN ('SUCCEEDED', 'SKIPPED', 'DEAD')

-- name: BackfillFailed
UPDATE msgx_inbox SET backfill_attempts = backfill_attempts + 1, backfill_next_at = $3, backfill_error = $4
WHERE stream = $1 AND msg_id = $2 AND backfill_next_at IS NOT NULL

-- name: ArchiveCandidates
-- Oldest first along the primary key, so old rows are found without an extra index.
SELECT msg_id FROM msgx_inbox
WHERE stream = $1 AND status IN ('SUCCEEDED', 'SKIPPED', 'DEAD') AND finished_at < $2 AND backfill_next_at IS NULL
ORDER BY msg_id
LIMIT $3

-- name: ArchiveCopy
INSERT INTO msgx_inbox_hst (stream, msg_id, payload, identity, kind, status, error_class, reason, attempts,
    processing_started_at, received_at, finished_at, backfilled_at, archived_at)
SELECT stream, msg_id, payload, identity, kind, status, error_class, reason, attempts,
    processing_started_at, received_at, finished_at, backfilled_at, $3
FROM msgx_inbox
WHERE stream = $1 AND msg_id = ANY($2::bigint[]) AND msg_id BETWEEN (SELECT min(i) FROM unnest($2::bigint[]) i) AND (SELECT max(i) FROM unnest($2::bigint[]) i)
  AND status IN ('SUCCEEDED', 'SKIPPED', 'DEAD')
ON CONFLICT (stream, msg_id) DO NOTHING

-- name: ArchiveDelete
DELETE FROM msgx_inbox WHERE stream = $1 AND msg_id = ANY($2::bigint[]) AND msg_id BETWEEN (SELECT min(i) FROM unnest($2::bigint[]) i) AND (SELECT max(i) FROM unnest($2::bigint[]) i)
  AND status IN ('SUCCEEDED', 'SKIPPED', 'DEAD')

-- name: ReplayByClass
SELECT msg_id FROM msgx_inbox
WHERE stream = $1 AND status IN ('FAILED', 'DEAD') AND error_class = $2
ORDER BY msg_id
LIMIT $3
FOR UPDATE

-- name: ReplayByIDs
SELECT msg_id, status, COALESCE(error_class, '') FROM msgx_inbox
WHERE stream = $1 AND msg_id = ANY($2::bigint[]) AND msg_id BETWEEN (SELECT min(i) FROM unnest($2::bigint[]) i) AND (SELECT max(i) FROM unnest($2::bigint[]) i)
ORDER BY msg_id
FOR UPDATE

-- name: ReplayReset
-- Back to PENDING with attempts and times reset; identity, error class, reason
-- and the error history are kept.
UPDATE msgx_inbox SET status = 'PENDING', attempts = 0, next_attempt_at = NULL,
    processing_started_at = NULL, finished_at = NULL,
    backfill_next_at = NULL, backfill_attempts = 0, backfill_error = NULL, backfilled_at = NULL
WHERE stream = $1 AND msg_id = ANY($2::bigint[]) AND msg_id BETWEEN (SELECT min(i) FROM unnest($2::bigint[]) i) AND (SELECT max(i) FROM unnest($2::bigint[]) i)
  AND status IN ('FAILED', 'DEAD')

-- name: ReplayAudit
INSERT INTO msgx_inbox_replay (stream, at, actor, reason, selector, msg_ids, count) VALUES ($1, $2, $3, $4, $5, $6, $7)
