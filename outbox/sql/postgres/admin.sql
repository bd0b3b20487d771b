-- name: ReplayIDs
UPDATE msgx_outbox SET status = 'PENDING', attempts = 0, next_attempt_at = $2, locked_until = NULL, done_at = NULL, covered_by = NULL
WHERE event_id = ANY($1::text[]) AND status = 'DEAD'

-- name: ReplayTarget
UPDATE msgx_outbox SET status = 'PENDING', attempts = 0, next_attempt_at = $2, locked_until = NULL, done_at = NULL, covered_by = NULL
WHERE target = $1 AND status = 'DEAD'

-- name: ListDead
SELECT id, event_id, target, topic, partition_key, event_type, attempts, COALESCE(last_error, ''), created_at, done_at
FROM msgx_outbox WHERE target = $1 AND status = 'DEAD' AND id > $2 ORDER BY id LIMIT $3

-- name: Get
SELECT event_id, id, target, topic, partition_key, event_type, status, attempts, COALESCE(last_error, ''), created_at, next_attempt_at, done_at
FROM msgx_outbox WHERE event_id = $1
