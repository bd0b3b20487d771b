-- name: ReplayIDs
UPDATE msgx_outbox SET status = 'PENDING', attempts = 0, lease_expiries = 0, next_attempt_at = ?2, locked_until = NULL, dead_at = NULL
WHERE event_id IN (SELECT value FROM json_each(?1)) AND status = 'DEAD'

-- name: ReplayTarget
UPDATE msgx_outbox SET status = 'PENDING', attempts = 0, lease_expiries = 0, next_attempt_at = ?2, locked_until = NULL, dead_at = NULL
WHERE target = ?1 AND status = 'DEAD'

-- name: ListDead
SELECT id, event_id, target, topic, partition_key, event_type, attempts, COALESCE(last_error, ''), created_at, dead_at
FROM msgx_outbox WHERE target = ?1 AND status = 'DEAD' AND id > ?2 ORDER BY id LIMIT ?3

-- name: Get
SELECT event_id, id, target, topic, partition_key, event_type, status, attempts, COALESCE(last_error, ''), created_at, next_attempt_at, dead_at, NULL, lease_expiries
FROM msgx_outbox WHERE event_id = ?1
UNION ALL
SELECT * FROM (
    SELECT event_id, id, target, topic, partition_key, event_type, status, attempts, COALESCE(last_error, ''), created_at, done_at, done_at, covered_by, 0
    FROM msgx_outbox_sent WHERE event_id = ?1 AND NOT EXISTS (SELECT 1 FROM msgx_outbox WHERE event_id = ?1)
    ORDER BY done_at DESC LIMIT 1)
