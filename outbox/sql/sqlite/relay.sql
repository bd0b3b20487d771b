-- SQLite runs one writer at a time, so a claim is a plain UPDATE … RETURNING;
-- id lists are JSON arrays read with json_each.

-- name: ClaimUnordered
UPDATE msgx_outbox SET locked_until = ?4, attempts = attempts + 1
WHERE id IN (
    SELECT id FROM msgx_outbox
    WHERE target = ?1 AND status = 'PENDING' AND id > ?2
      AND next_attempt_at <= ?3 AND (locked_until IS NULL OR locked_until <= ?3)
    ORDER BY id LIMIT ?5)
RETURNING id, event_id, topic, partition_key, event_type, payload, headers, attempts, created_at

-- name: ClaimKeyless
UPDATE msgx_outbox SET locked_until = ?3, attempts = attempts + 1
WHERE id IN (
    SELECT id FROM msgx_outbox
    WHERE target = ?1 AND status = 'PENDING' AND partition_key = ''
      AND next_attempt_at <= ?2 AND (locked_until IS NULL OR locked_until <= ?2)
    ORDER BY id LIMIT ?4)
RETURNING id, event_id, topic, partition_key, event_type, payload, headers, attempts, created_at

-- name: WalkHeads
WITH RECURSIVE walk(k) AS (
    SELECT (SELECT partition_key FROM msgx_outbox
            WHERE target = ?1 AND status = 'PENDING' AND partition_key > ?2
            ORDER BY partition_key LIMIT 1)
  UNION ALL
    SELECT (SELECT partition_key FROM msgx_outbox
            WHERE target = ?1 AND status = 'PENDING' AND partition_key > walk.k
            ORDER BY partition_key LIMIT 1)
    FROM walk WHERE walk.k IS NOT NULL
    LIMIT ?4 + 1
)
SELECT w.k, o.id, o.next_attempt_at <= ?3 AND (o.locked_until IS NULL OR o.locked_until <= ?3)
FROM (SELECT k FROM walk WHERE k IS NOT NULL LIMIT ?4) w
JOIN msgx_outbox o ON o.id = (
    SELECT id FROM msgx_outbox
    WHERE target = ?1 AND status = 'PENDING' AND partition_key = w.k
    ORDER BY id LIMIT 1)

-- name: ClaimHeads
UPDATE msgx_outbox SET locked_until = ?4, attempts = attempts + 1
WHERE target = ?1 AND status = 'PENDING' AND id IN (SELECT value FROM json_each(?2))
  AND next_attempt_at <= ?3 AND (locked_until IS NULL OR locked_until <= ?3)
RETURNING id, event_id, topic, partition_key, event_type, payload, headers, attempts, created_at

-- name: WalkCompacted
WITH RECURSIVE walk(k) AS (
    SELECT (SELECT partition_key FROM msgx_outbox
            WHERE target = ?1 AND status = 'PENDING' AND partition_key > ?2
            ORDER BY partition_key LIMIT 1)
  UNION ALL
    SELECT (SELECT partition_key FROM msgx_outbox
            WHERE target = ?1 AND status = 'PENDING' AND partition_key > walk.k
            ORDER BY partition_key LIMIT 1)
    FROM walk WHERE walk.k IS NOT NULL
    LIMIT ?4 + 1
), keys AS (
    SELECT k,
        (SELECT id FROM msgx_outbox WHERE target = ?1 AND status = 'PENDING' AND partition_key = walk.k ORDER BY id LIMIT 1) AS head,
        (SELECT id FROM msgx_outbox WHERE target = ?1 AND status = 'PENDING' AND partition_key = walk.k ORDER BY id DESC LIMIT 1) AS rep
    FROM walk WHERE k IS NOT NULL LIMIT ?4
)
SELECT keys.k, h.id, r.id,
       (h.locked_until IS NULL OR h.locked_until <= ?3) AND r.next_attempt_at <= ?3
FROM keys JOIN msgx_outbox h ON h.id = keys.head JOIN msgx_outbox r ON r.id = keys.rep

-- name: LeaseHeads
UPDATE msgx_outbox SET locked_until = ?4
WHERE target = ?1 AND status = 'PENDING' AND id IN (SELECT value FROM json_each(?2))
  AND (locked_until IS NULL OR locked_until <= ?3)
RETURNING id

-- name: LeaseReps
UPDATE msgx_outbox SET locked_until = ?3, attempts = attempts + 1
WHERE target = ?1 AND status = 'PENDING' AND id IN (SELECT value FROM json_each(?2))
RETURNING id, event_id, topic, partition_key, event_type, payload, headers, attempts, created_at

-- name: MarkSent
UPDATE msgx_outbox SET status = 'SENT', done_at = ?4, locked_until = NULL
WHERE target = ?1 AND status = 'PENDING' AND id IN (SELECT value FROM json_each(?2)) AND locked_until = ?3

-- name: MarkRetry
UPDATE msgx_outbox SET next_attempt_at = ?4, locked_until = NULL, last_error = ?5
WHERE target = ?1 AND status = 'PENDING' AND id IN (SELECT value FROM json_each(?2)) AND locked_until = ?3

-- name: MarkDead
UPDATE msgx_outbox SET status = 'DEAD', done_at = ?4, locked_until = NULL, last_error = ?5
WHERE target = ?1 AND status = 'PENDING' AND id IN (SELECT value FROM json_each(?2)) AND locked_until = ?3

-- name: ClearLease
UPDATE msgx_outbox SET locked_until = NULL
WHERE target = ?1 AND status = 'PENDING' AND id IN (SELECT value FROM json_each(?2)) AND locked_until = ?3

-- name: Release
UPDATE msgx_outbox SET locked_until = NULL, attempts = MAX(attempts - 1, 0)
WHERE target = ?1 AND status = 'PENDING' AND id IN (SELECT value FROM json_each(?2)) AND locked_until = ?3

-- name: CoverSent
-- The older pending events of the keys are covered first (they are told apart
-- from the newest by id), then the newest events themselves are finished.
UPDATE msgx_outbox SET status = 'COVERED', covered_by = r.id, done_at = ?4, locked_until = NULL
FROM (SELECT id, partition_key FROM msgx_outbox
      WHERE target = ?1 AND status = 'PENDING' AND id IN (SELECT value FROM json_each(?2)) AND locked_until = ?3) AS r
WHERE msgx_outbox.target = ?1 AND msgx_outbox.status = 'PENDING'
  AND msgx_outbox.partition_key = r.partition_key AND msgx_outbox.id < r.id

-- name: FinishReps
UPDATE msgx_outbox SET status = ?5, done_at = ?4, locked_until = NULL, last_error = COALESCE(?6, last_error)
WHERE target = ?1 AND status = 'PENDING' AND id IN (SELECT value FROM json_each(?2)) AND locked_until = ?3

-- name: OldestPending
SELECT created_at FROM msgx_outbox WHERE target = ?1 AND status = 'PENDING' ORDER BY id LIMIT 1

-- name: DeleteDone
DELETE FROM msgx_outbox WHERE id IN (
    SELECT id FROM msgx_outbox
    WHERE status IN ('SENT', 'COVERED') AND done_at < ?1
    ORDER BY done_at LIMIT ?2)
