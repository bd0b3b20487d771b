-- SQLite runs one writer at a time, so a claim is a plain UPDATE … RETURNING;
-- id lists are JSON arrays read with json_each.

-- name: ClaimUnordered
UPDATE msgx_outbox SET locked_until = ?4, attempts = attempts + 1,
    lease_expiries = lease_expiries + CASE WHEN locked_until IS NULL THEN 0 ELSE 1 END
WHERE id IN (
    SELECT id FROM msgx_outbox
    WHERE target = ?1 AND status = 'PENDING' AND id > ?2
      AND next_attempt_at <= ?3 AND (locked_until IS NULL OR locked_until <= ?3)
    ORDER BY id LIMIT ?5)
RETURNING id, event_id, topic, partition_key, event_type, payload, headers, attempts, created_at, lease_expiries

-- name: ClaimKeyless
UPDATE msgx_outbox SET locked_until = ?3, attempts = attempts + 1,
    lease_expiries = lease_expiries + CASE WHEN locked_until IS NULL THEN 0 ELSE 1 END
WHERE id IN (
    SELECT id FROM msgx_outbox
    WHERE target = ?1 AND status = 'PENDING' AND partition_key = ''
      AND next_attempt_at <= ?2 AND (locked_until IS NULL OR locked_until <= ?2)
    ORDER BY id LIMIT ?4)
RETURNING id, event_id, topic, partition_key, event_type, payload, headers, attempts, created_at, lease_expiries

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
-- A head with a DEAD event of its key before it (not skipped) is not ready:
-- a dead event holds its key (see the PostgreSQL ClaimHeads).
SELECT w.k, o.id, o.next_attempt_at <= ?3 AND (o.locked_until IS NULL OR o.locked_until <= ?3)
       AND NOT EXISTS (SELECT 1 FROM msgx_outbox d
           WHERE d.target = ?1 AND d.status = 'DEAD' AND d.skipped_at IS NULL
             AND d.partition_key = w.k AND d.id < o.id)
FROM (SELECT k FROM walk WHERE k IS NOT NULL LIMIT ?4) w
JOIN msgx_outbox o ON o.id = (
    SELECT id FROM msgx_outbox
    WHERE target = ?1 AND status = 'PENDING' AND partition_key = w.k
    ORDER BY id LIMIT 1)

-- name: ClaimHeadIDs
UPDATE msgx_outbox SET locked_until = ?4, attempts = attempts + 1,
    lease_expiries = lease_expiries + CASE WHEN locked_until IS NULL THEN 0 ELSE 1 END
WHERE target = ?1 AND status = 'PENDING' AND id IN (SELECT value FROM json_each(?2))
  AND next_attempt_at <= ?3 AND (locked_until IS NULL OR locked_until <= ?3)
RETURNING id, event_id, topic, partition_key, event_type, payload, headers, attempts, created_at, lease_expiries

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
-- A newest event that is also its key's head was just leased by LeaseHeads.
UPDATE msgx_outbox SET locked_until = ?3, attempts = attempts + 1,
    lease_expiries = lease_expiries + CASE WHEN locked_until IS NULL OR locked_until = ?3 THEN 0 ELSE 1 END
WHERE target = ?1 AND status = 'PENDING' AND id IN (SELECT value FROM json_each(?2))
RETURNING id, event_id, topic, partition_key, event_type, payload, headers, attempts, created_at, lease_expiries

-- name: SentInsert
-- MarkSent, first half: the record of the sent events.
INSERT INTO msgx_outbox_sent (event_id, id, target, topic, partition_key, event_type, status, attempts, last_error, created_at, done_at)
SELECT event_id, id, target, topic, partition_key, event_type, 'SENT', attempts, last_error, created_at, ?4 FROM msgx_outbox
WHERE target = ?1 AND status = 'PENDING' AND id IN (SELECT value FROM json_each(?2)) AND locked_until = ?3

-- name: SentDelete
-- MarkSent, second half.
DELETE FROM msgx_outbox
WHERE target = ?1 AND status = 'PENDING' AND id IN (SELECT value FROM json_each(?2)) AND locked_until = ?3

-- name: MarkRetry
UPDATE msgx_outbox SET next_attempt_at = ?4, locked_until = NULL, last_error = ?5
WHERE target = ?1 AND status = 'PENDING' AND id IN (SELECT value FROM json_each(?2)) AND locked_until = ?3

-- name: MarkDead
UPDATE msgx_outbox SET status = 'DEAD', dead_at = ?4, locked_until = NULL, last_error = ?5
WHERE target = ?1 AND status = 'PENDING' AND id IN (SELECT value FROM json_each(?2)) AND locked_until = ?3

-- name: ClearLease
UPDATE msgx_outbox SET locked_until = NULL
WHERE target = ?1 AND status = 'PENDING' AND id IN (SELECT value FROM json_each(?2)) AND locked_until = ?3

-- name: Release
UPDATE msgx_outbox SET locked_until = NULL, attempts = MAX(attempts - 1, 0)
WHERE target = ?1 AND status = 'PENDING' AND id IN (SELECT value FROM json_each(?2)) AND locked_until = ?3

-- name: ExtendLease
UPDATE msgx_outbox SET locked_until = ?4
WHERE target = ?1 AND status = 'PENDING' AND id IN (SELECT value FROM json_each(?2)) AND locked_until = ?3
RETURNING id

-- name: CoverInsert
-- The older pending events of the keys of the newest events ?2 are recorded
-- as COVERED by them (then deleted by CoverDelete), before the newest events
-- themselves are finished.
INSERT INTO msgx_outbox_sent (event_id, id, target, topic, partition_key, event_type, status, attempts, last_error, created_at, done_at, covered_by)
SELECT o.event_id, o.id, o.target, o.topic, o.partition_key, o.event_type, 'COVERED', o.attempts, o.last_error, o.created_at, ?4, r.id
FROM msgx_outbox o
JOIN (SELECT id, partition_key FROM msgx_outbox
      WHERE target = ?1 AND status = 'PENDING' AND id IN (SELECT value FROM json_each(?2)) AND locked_until = ?3) AS r
  ON o.partition_key = r.partition_key AND o.id < r.id
WHERE o.target = ?1 AND o.status = 'PENDING'

-- name: KeyState
-- The newest sent id of the keys of the sent newest events ?2 (see Replay).
INSERT INTO msgx_outbox_key_state (target, partition_key, sent_id)
SELECT target, partition_key, id FROM msgx_outbox
WHERE target = ?1 AND status = 'PENDING' AND id IN (SELECT value FROM json_each(?2)) AND locked_until = ?3 AND partition_key <> ''
ON CONFLICT (target, partition_key) DO UPDATE SET sent_id = MAX(sent_id, excluded.sent_id)

-- name: CoverDelete
DELETE FROM msgx_outbox
WHERE target = ?1 AND status = 'PENDING' AND EXISTS (
    SELECT 1 FROM msgx_outbox r
    WHERE r.target = ?1 AND r.status = 'PENDING' AND r.id IN (SELECT value FROM json_each(?2)) AND r.locked_until = ?3
      AND r.partition_key = msgx_outbox.partition_key AND msgx_outbox.id < r.id)

-- name: OldestPending
SELECT created_at FROM msgx_outbox WHERE target = ?1 AND status = 'PENDING' ORDER BY id LIMIT 1

-- name: DeleteDone
DELETE FROM msgx_outbox_sent WHERE rowid IN (
    SELECT rowid FROM msgx_outbox_sent WHERE done_at < ?1 ORDER BY done_at LIMIT ?2)

-- name: Hold
-- Release that notes why: the target's broker was unavailable.
UPDATE msgx_outbox SET locked_until = NULL, attempts = MAX(attempts - 1, 0), last_error = ?4
WHERE target = ?1 AND status = 'PENDING' AND id IN (SELECT value FROM json_each(?2)) AND locked_until = ?3
