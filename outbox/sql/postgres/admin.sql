-- name: ReplayIDs
-- The DEAD events $1 return to PENDING, except those of a compacted key
-- whose newer state was already sent (msgx_outbox_key_state): they are
-- recorded as COVERED by it instead, so replay never sends an older state
-- after a newer one. Returns each event id with what became of it.
WITH sel AS (
    SELECT o.ctid AS t, o.id, k.sent_id
    FROM msgx_outbox o
    LEFT JOIN msgx_outbox_key_state k ON k.target = o.target AND k.partition_key = o.partition_key
    WHERE o.event_id = ANY($1::text[]) AND o.status = 'DEAD'
    FOR UPDATE OF o
), cov AS (
    DELETE FROM msgx_outbox o USING sel
    WHERE o.ctid = sel.t AND sel.sent_id > sel.id
    RETURNING o.event_id, o.id, o.target, o.topic, o.partition_key, o.event_type, o.attempts, o.last_error, o.created_at, sel.sent_id
), rec AS (
    INSERT INTO msgx_outbox_sent (event_id, id, target, topic, partition_key, event_type, status, attempts, last_error, created_at, done_at, covered_by)
    SELECT event_id, id, target, topic, partition_key, event_type, 'COVERED', attempts, last_error, created_at, $2::timestamptz, sent_id FROM cov
), rep AS (
    UPDATE msgx_outbox o SET status = 'PENDING', attempts = 0, lease_expiries = 0, next_attempt_at = $2, locked_until = NULL, dead_at = NULL, skipped_at = NULL
    FROM sel
    WHERE o.ctid = sel.t AND (sel.sent_id IS NULL OR sel.sent_id < sel.id)
    RETURNING o.event_id
)
SELECT event_id, false FROM rep
UNION ALL
SELECT event_id, true FROM cov

-- name: DeadOfTarget
SELECT event_id FROM msgx_outbox WHERE target = $1 AND status = 'DEAD' ORDER BY id

-- name: ReplayAudit
INSERT INTO msgx_outbox_replay (at, actor, reason, selector, replayed, covered, action) VALUES ($1, $2, $3, $4, $5, $6, $7)

-- name: ListDead
SELECT id, event_id, target, topic, partition_key, event_type, attempts, COALESCE(last_error, ''), created_at, dead_at
FROM msgx_outbox WHERE target = $1 AND status = 'DEAD' AND id > $2 ORDER BY id LIMIT $3

-- name: Get
-- Pending and dead events by primary key; finished ones from their record
-- (no index on event id there: an operator's lookup, not a hot path).
SELECT event_id, id, target, topic, partition_key, event_type, status, attempts, COALESCE(last_error, ''), created_at, next_attempt_at, dead_at, NULL::bigint, lease_expiries, skipped_at
FROM msgx_outbox WHERE event_id = $1
UNION ALL
(SELECT event_id, id, target, topic, partition_key, event_type, status, attempts, COALESCE(last_error, ''), created_at, done_at, done_at, covered_by, 0, NULL::timestamptz
 FROM msgx_outbox_sent WHERE event_id = $1 AND NOT EXISTS (SELECT 1 FROM msgx_outbox WHERE event_id = $1)
 ORDER BY done_at DESC LIMIT 1)

-- name: Skip
-- The DEAD events $1 not skipped yet are marked skipped at $2: they stay
-- DEAD but no longer hold their key (see ClaimHeads in relay.sql).
UPDATE msgx_outbox d SET skipped_at = $2
WHERE d.event_id = ANY($1::text[]) AND d.status = 'DEAD' AND d.skipped_at IS NULL
RETURNING d.event_id

-- name: BlockedKeys
-- The keys of target $1 held by a DEAD event (not skipped): the oldest
-- such event of each key, in id order, at most $2, with how many PENDING
-- events of the key wait behind it. Read from the msgx_outbox_dead_key index
-- and, per key, the pending key index (a scalar subquery per dead event, as
-- in ClaimHeads).
SELECT d.partition_key, d.event_id, d.id, d.dead_at,
    (SELECT COUNT(*) FROM msgx_outbox w
     WHERE w.target = $1 AND w.status = 'PENDING' AND w.partition_key = d.partition_key AND w.id > d.id)
FROM msgx_outbox d
WHERE d.target = $1 AND d.status = 'DEAD' AND d.skipped_at IS NULL AND d.partition_key <> ''
  AND (SELECT 1 FROM msgx_outbox e
       WHERE e.target = $1 AND e.status = 'DEAD' AND e.skipped_at IS NULL
         AND e.partition_key = d.partition_key AND e.id < d.id
       LIMIT 1) IS NULL
ORDER BY d.id
LIMIT $2

-- name: BlockedKeyCount
SELECT COUNT(DISTINCT partition_key) FROM msgx_outbox
WHERE target = $1 AND status = 'DEAD' AND skipped_at IS NULL AND partition_key <> ''

-- name: WaitingBehind
-- For each DEAD event $1 with a key, how many PENDING events of its key
-- are newer (wait behind it on a per-key target).
SELECT d.event_id,
    (SELECT COUNT(*) FROM msgx_outbox w
     WHERE w.target = d.target AND w.status = 'PENDING' AND w.partition_key = d.partition_key AND w.id > d.id)
FROM msgx_outbox d
WHERE d.event_id = ANY($1::text[]) AND d.status = 'DEAD' AND d.partition_key <> ''
