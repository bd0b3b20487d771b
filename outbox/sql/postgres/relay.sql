-- name: ClaimUnordered
-- Due, unleased rows of a target in id order from after $2, locked with SKIP
-- LOCKED so that concurrent relays take disjoint rows; the lease is set and
-- the attempt counted in the same statement (one transaction).
WITH c AS (
    SELECT id FROM msgx_outbox
    WHERE target = $1 AND status = 'PENDING' AND id > $2
      AND next_attempt_at <= $3 AND (locked_until IS NULL OR locked_until <= $3)
    ORDER BY id
    LIMIT $5
    FOR UPDATE SKIP LOCKED
)
UPDATE msgx_outbox o SET locked_until = $4, attempts = o.attempts + 1
FROM c
WHERE o.target = $1 AND o.status = 'PENDING' AND o.id = c.id
RETURNING o.id, o.event_id, o.topic, o.partition_key, o.event_type, o.payload, o.headers, o.attempts, o.created_at

-- name: ClaimKeyless
-- Events without a key carry no order: ordered lanes claim them like the
-- unordered lane does.
WITH c AS (
    SELECT id FROM msgx_outbox
    WHERE target = $1 AND status = 'PENDING' AND partition_key = ''
      AND next_attempt_at <= $2 AND (locked_until IS NULL OR locked_until <= $2)
    ORDER BY partition_key, id
    LIMIT $4
    FOR UPDATE SKIP LOCKED
)
UPDATE msgx_outbox o SET locked_until = $3, attempts = o.attempts + 1
FROM c
WHERE o.target = $1 AND o.status = 'PENDING' AND o.id = c.id
RETURNING o.id, o.event_id, o.topic, o.partition_key, o.event_type, o.payload, o.headers, o.attempts, o.created_at

-- name: WalkHeads
-- A loose index scan over the keys after $2: each step descends the index to
-- the first pending entry of the next key, which is that key's head (its
-- smallest pending id). It visits at most $4 keys whatever the backlog.
WITH RECURSIVE walk AS (
    (SELECT partition_key AS k, id, next_attempt_at, locked_until FROM msgx_outbox
     WHERE target = $1 AND status = 'PENDING' AND partition_key > $2
     ORDER BY partition_key, id LIMIT 1)
  UNION ALL
    SELECT n.k, n.id, n.next_attempt_at, n.locked_until
    FROM walk w CROSS JOIN LATERAL (
        SELECT partition_key AS k, id, next_attempt_at, locked_until FROM msgx_outbox
        WHERE target = $1 AND status = 'PENDING' AND partition_key > w.k
        ORDER BY partition_key, id LIMIT 1) n
)
SELECT k, id, next_attempt_at <= $3 AND (locked_until IS NULL OR locked_until <= $3)
FROM walk LIMIT $4

-- name: ClaimHeads
-- Claims the given heads if they are still pending, due and unleased (checked
-- again on the locked row version).
WITH c AS (
    SELECT id FROM msgx_outbox
    WHERE target = $1 AND status = 'PENDING' AND id = ANY($2::bigint[])
      AND next_attempt_at <= $3 AND (locked_until IS NULL OR locked_until <= $3)
    FOR UPDATE SKIP LOCKED
)
UPDATE msgx_outbox o SET locked_until = $4, attempts = o.attempts + 1
FROM c
WHERE o.target = $1 AND o.status = 'PENDING' AND o.id = c.id
RETURNING o.id, o.event_id, o.topic, o.partition_key, o.event_type, o.payload, o.headers, o.attempts, o.created_at

-- name: WalkCompacted
-- Like WalkHeads, and for each key also its newest pending event.
WITH RECURSIVE walk AS (
    (SELECT partition_key AS k, id, locked_until FROM msgx_outbox
     WHERE target = $1 AND status = 'PENDING' AND partition_key > $2
     ORDER BY partition_key, id LIMIT 1)
  UNION ALL
    SELECT n.k, n.id, n.locked_until
    FROM walk w CROSS JOIN LATERAL (
        SELECT partition_key AS k, id, locked_until FROM msgx_outbox
        WHERE target = $1 AND status = 'PENDING' AND partition_key > w.k
        ORDER BY partition_key, id LIMIT 1) n
), keys AS (
    SELECT * FROM walk LIMIT $4
)
SELECT keys.k, keys.id, r.id,
       (keys.locked_until IS NULL OR keys.locked_until <= $3) AND r.next_attempt_at <= $3
FROM keys CROSS JOIN LATERAL (
    SELECT id, next_attempt_at FROM msgx_outbox
    WHERE target = $1 AND status = 'PENDING' AND partition_key = keys.k
    ORDER BY partition_key DESC, id DESC LIMIT 1) r

-- name: ClaimCompacted
-- Locks the heads ($2) of the keys, the key's claim marker, and leases them
-- with the newest events ($3, pairwise); the attempt is counted on the newest.
WITH l AS (
    SELECT id FROM msgx_outbox
    WHERE target = $1 AND status = 'PENDING' AND id = ANY($2::bigint[])
      AND (locked_until IS NULL OR locked_until <= $4)
    FOR UPDATE SKIP LOCKED
), x AS (
    SELECT p.head, p.rep FROM unnest($2::bigint[], $3::bigint[]) AS p(head, rep) JOIN l ON l.id = p.head
)
UPDATE msgx_outbox o
SET locked_until = $5,
    attempts = o.attempts + CASE WHEN o.id IN (SELECT rep FROM x) THEN 1 ELSE 0 END
WHERE o.target = $1 AND o.status = 'PENDING'
  AND (o.id IN (SELECT head FROM x) OR o.id IN (SELECT rep FROM x))
RETURNING o.id, o.event_id, o.topic, o.partition_key, o.event_type, o.payload, o.headers, o.attempts, o.created_at

-- name: MarkSent
-- Every finishing update is fenced by the lease ($3): a relay whose lease ran
-- out changes nothing that another relay has claimed since.
UPDATE msgx_outbox SET status = 'SENT', done_at = $4, locked_until = NULL
WHERE target = $1 AND status = 'PENDING' AND id = ANY($2::bigint[]) AND locked_until = $3

-- name: MarkRetry
UPDATE msgx_outbox SET next_attempt_at = $4, locked_until = NULL, last_error = $5
WHERE target = $1 AND status = 'PENDING' AND id = ANY($2::bigint[]) AND locked_until = $3

-- name: MarkDead
UPDATE msgx_outbox SET status = 'DEAD', done_at = $4, locked_until = NULL, last_error = $5
WHERE target = $1 AND status = 'PENDING' AND id = ANY($2::bigint[]) AND locked_until = $3

-- name: ClearLease
-- Ends the lease of compacted-lane heads whose key was not sent.
UPDATE msgx_outbox SET locked_until = NULL
WHERE target = $1 AND status = 'PENDING' AND id = ANY($2::bigint[]) AND locked_until = $3

-- name: Release
-- Gives claims back without counting the attempt (shutdown).
UPDATE msgx_outbox SET locked_until = NULL, attempts = GREATEST(attempts - 1, 0)
WHERE target = $1 AND status = 'PENDING' AND id = ANY($2::bigint[]) AND locked_until = $3

-- name: CoverSent
-- Compacted lane: the sent newest events ($2) become SENT (or DEAD, $5) and
-- the older pending events of their keys COVERED by them.
WITH rep AS (
    UPDATE msgx_outbox SET status = $5, done_at = $4, locked_until = NULL, last_error = COALESCE($6, last_error)
    WHERE target = $1 AND status = 'PENDING' AND id = ANY($2::bigint[]) AND locked_until = $3
    RETURNING id, partition_key
)
UPDATE msgx_outbox o SET status = 'COVERED', covered_by = rep.id, done_at = $4, locked_until = NULL
FROM rep
WHERE o.target = $1 AND o.status = 'PENDING' AND o.partition_key = rep.partition_key AND o.id < rep.id

-- name: OldestPending
SELECT created_at FROM msgx_outbox WHERE target = $1 AND status = 'PENDING' ORDER BY id LIMIT 1

-- name: DeleteDone
DELETE FROM msgx_outbox WHERE event_id IN (
    SELECT event_id FROM msgx_outbox
    WHERE status IN ('SENT', 'COVERED') AND done_at < $1
    ORDER BY done_at LIMIT $2
    FOR UPDATE SKIP LOCKED)
