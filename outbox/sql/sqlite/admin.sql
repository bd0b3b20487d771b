-- name: ReplayCovered
-- The DEAD events ?1 of a key whose newer state was already sent (see the
-- PostgreSQL ReplayIDs) are recorded as COVERED by it ...
INSERT INTO msgx_outbox_sent (event_id, id, target, topic, partition_key, event_type, status, attempts, last_error, created_at, done_at, covered_by)
SELECT o.event_id, o.id, o.target, o.topic, o.partition_key, o.event_type, 'COVERED', o.attempts, o.last_error, o.created_at, ?2, k.sent_id
FROM msgx_outbox o JOIN msgx_outbox_key_state k ON k.target = o.target AND k.partition_key = o.partition_key
WHERE o.event_id IN (SELECT value FROM json_each(?1)) AND o.status = 'DEAD' AND k.sent_id > o.id
RETURNING event_id

-- name: ReplayCoveredDelete
-- ... and leave the work table.
DELETE FROM msgx_outbox
WHERE event_id IN (SELECT value FROM json_each(?1)) AND status = 'DEAD' AND EXISTS (
    SELECT 1 FROM msgx_outbox_key_state k
    WHERE k.target = msgx_outbox.target AND k.partition_key = msgx_outbox.partition_key AND k.sent_id > msgx_outbox.id)

-- name: ReplayIDs
UPDATE msgx_outbox SET status = 'PENDING', attempts = 0, lease_expiries = 0, next_attempt_at = ?2, locked_until = NULL, dead_at = NULL
WHERE event_id IN (SELECT value FROM json_each(?1)) AND status = 'DEAD'
RETURNING event_id

-- name: DeadOfTarget
SELECT event_id FROM msgx_outbox WHERE target = ?1 AND status = 'DEAD' ORDER BY id

-- name: ReplayAudit
INSERT INTO msgx_outbox_replay (at, actor, reason, selector, replayed, covered) VALUES (?1, ?2, ?3, ?4, ?5, ?6)

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
