-- Plans. These statements must keep their plan whatever the statistics say
-- (autovacuum may be off, and a fresh table has none). Rows are found by one
-- ordered index scan or by a loose index scan, and from then on only by
-- ctid: the claim returns each row's new ctid and the relay's later
-- statements name rows by ctid and check the lease. Those statements test
-- status <> 'DEAD' rather than status = 'PENDING' (the same thing in this
-- table) so that no partial index can look like a cheaper way in.

-- name: ClaimUnordered
-- Due, unleased rows of a target in id order from after $2, locked with SKIP
-- LOCKED so that concurrent relays take disjoint rows; the lease is set and
-- the attempt counted in the same statement (one transaction).
WITH c AS (
    SELECT ctid FROM msgx_outbox
    WHERE target = $1 AND status = 'PENDING' AND id > $2
      AND next_attempt_at <= $3 AND (locked_until IS NULL OR locked_until <= $3)
    ORDER BY id
    LIMIT $5
    FOR UPDATE SKIP LOCKED
)
UPDATE msgx_outbox o SET locked_until = $4, attempts = o.attempts + 1,
    lease_expiries = o.lease_expiries + CASE WHEN o.locked_until IS NULL THEN 0 ELSE 1 END
WHERE o.ctid = ANY(ARRAY(SELECT ctid FROM c)) AND o.target = $1 AND o.status <> 'DEAD'
RETURNING o.ctid, o.id, o.event_id, o.topic, o.partition_key, o.event_type, o.payload, o.headers, o.attempts, o.created_at, o.lease_expiries

-- name: ClaimKeyless
-- Events without a key carry no order: ordered lanes claim them like the
-- unordered lane does.
WITH c AS (
    SELECT ctid FROM msgx_outbox
    WHERE target = $1 AND status = 'PENDING' AND partition_key = ''
      AND next_attempt_at <= $2 AND (locked_until IS NULL OR locked_until <= $2)
    ORDER BY partition_key, id
    LIMIT $4
    FOR UPDATE SKIP LOCKED
)
UPDATE msgx_outbox o SET locked_until = $3, attempts = o.attempts + 1,
    lease_expiries = o.lease_expiries + CASE WHEN o.locked_until IS NULL THEN 0 ELSE 1 END
WHERE o.ctid = ANY(ARRAY(SELECT ctid FROM c)) AND o.target = $1 AND o.status <> 'DEAD'
RETURNING o.ctid, o.id, o.event_id, o.topic, o.partition_key, o.event_type, o.payload, o.headers, o.attempts, o.created_at, o.lease_expiries

-- name: ClaimHeads
-- Per-key lane, in one statement: a loose index scan over the keys after $2
-- (each step descends the index to the first pending entry of the next key,
-- which is that key's head, its smallest pending id) visits at most $5 keys
-- whatever the backlog; the heads that are due and unleased are locked with
-- SKIP LOCKED (checked again on the row's latest version: a head claimed or
-- sent meanwhile is skipped, never replaced by the row after it) and leased.
-- A head with a DEAD event of its key before it (not skipped by an operator)
-- is not claimed: a dead event holds its key, whose later events wait for
-- its replay or skip (one probe of the small msgx_outbox_dead_key index per
-- key visited). The key still counts as visited, so the walk moves past it.
-- The probe is a scalar subquery, not NOT EXISTS: PostgreSQL turns NOT
-- EXISTS into an anti join, and the generic plan made on an empty table
-- scanned every dead entry of the target for each head, matching the key
-- in a join filter; a subquery runs per head with the key in its index
-- condition.
-- A last row (id 0) carries the last key visited and how many were visited.
WITH RECURSIVE walk AS (
    (SELECT partition_key AS k, ctid AS t FROM msgx_outbox
     WHERE target = $1 AND status = 'PENDING' AND partition_key > $2
     ORDER BY partition_key, id LIMIT 1)
  UNION ALL
    SELECT n.k, n.t
    FROM walk w CROSS JOIN LATERAL (
        SELECT partition_key AS k, ctid AS t FROM msgx_outbox
        WHERE target = $1 AND status = 'PENDING' AND partition_key > w.k
        ORDER BY partition_key, id LIMIT 1) n
), keys AS MATERIALIZED (
    SELECT k, t FROM walk LIMIT $5
), c AS (
    SELECT h.ctid FROM msgx_outbox h
    WHERE h.ctid = ANY(ARRAY(SELECT t FROM keys)) AND h.target = $1 AND h.status <> 'DEAD'
      AND h.next_attempt_at <= $3 AND (h.locked_until IS NULL OR h.locked_until <= $3)
      AND (SELECT 1 FROM msgx_outbox d
           WHERE d.target = $1 AND d.status = 'DEAD' AND d.skipped_at IS NULL
             AND d.partition_key = h.partition_key AND d.id < h.id
           LIMIT 1) IS NULL
    FOR UPDATE OF h SKIP LOCKED
), u AS (
    UPDATE msgx_outbox o SET locked_until = $4, attempts = o.attempts + 1,
    lease_expiries = o.lease_expiries + CASE WHEN o.locked_until IS NULL THEN 0 ELSE 1 END
    WHERE o.ctid = ANY(ARRAY(SELECT ctid FROM c)) AND o.target = $1 AND o.status <> 'DEAD'
    RETURNING o.ctid, o.id, o.event_id, o.topic, o.partition_key, o.event_type, o.payload, o.headers, o.attempts, o.created_at, o.lease_expiries
)
SELECT ctid, id, event_id, topic, partition_key, event_type, payload, headers, attempts, created_at, lease_expiries FROM u
UNION ALL
SELECT '(0,0)'::tid, 0, '', '', COALESCE((SELECT max(k) FROM keys), ''), '', NULL, NULL, (SELECT count(*) FROM keys)::int, 'epoch'::timestamptz, 0

-- name: WalkCompacted
-- Like the walk of ClaimHeads, and for each key also its newest pending event.
WITH RECURSIVE walk AS (
    (SELECT partition_key AS k, id, ctid AS t, locked_until FROM msgx_outbox
     WHERE target = $1 AND status = 'PENDING' AND partition_key > $2
     ORDER BY partition_key, id LIMIT 1)
  UNION ALL
    SELECT n.k, n.id, n.t, n.locked_until
    FROM walk w CROSS JOIN LATERAL (
        SELECT partition_key AS k, id, ctid AS t, locked_until FROM msgx_outbox
        WHERE target = $1 AND status = 'PENDING' AND partition_key > w.k
        ORDER BY partition_key, id LIMIT 1) n
), keys AS (
    SELECT * FROM walk LIMIT $4
)
SELECT keys.k, keys.id, keys.t, r.id, r.ctid,
       (keys.locked_until IS NULL OR keys.locked_until <= $3) AND r.next_attempt_at <= $3
FROM keys CROSS JOIN LATERAL (
    SELECT id, ctid, next_attempt_at FROM msgx_outbox
    WHERE target = $1 AND status = 'PENDING' AND partition_key = keys.k
    ORDER BY partition_key DESC, id DESC LIMIT 1) r

-- name: ClaimCompacted
-- Locks the heads of the keys (ctids $2 with ids $6), whose lease marks the
-- key as in flight, and leases them with the newest events (ctids $3 with
-- ids $7, pairwise); the attempt is counted on the newest.
WITH p AS (
    SELECT * FROM unnest($2::tid[], $6::bigint[], $3::tid[], $7::bigint[]) AS p(ht, hi, rt, ri)
), l AS (
    SELECT o.ctid FROM msgx_outbox o JOIN p ON o.ctid = p.ht AND o.id = p.hi
    WHERE o.target = $1 AND o.status <> 'DEAD' AND (o.locked_until IS NULL OR o.locked_until <= $4)
    FOR UPDATE OF o SKIP LOCKED
), x AS (
    -- One row per row to update: a key with one pending event has head = newest.
    SELECT p.ht AS t, p.hi AS i, false AS rep FROM p JOIN l ON l.ctid = p.ht WHERE p.hi <> p.ri
    UNION ALL
    SELECT p.rt, p.ri, true FROM p JOIN l ON l.ctid = p.ht
)
UPDATE msgx_outbox o
SET locked_until = $5, attempts = o.attempts + CASE WHEN x.rep THEN 1 ELSE 0 END,
    lease_expiries = o.lease_expiries + CASE WHEN x.rep AND o.locked_until IS NOT NULL THEN 1 ELSE 0 END
FROM x
WHERE o.ctid = x.t AND o.id = x.i AND o.target = $1 AND o.status <> 'DEAD'
RETURNING o.ctid, o.id, o.event_id, o.topic, o.partition_key, o.event_type, o.payload, o.headers, o.attempts, o.created_at, o.lease_expiries

-- The statements that finish claimed rows name them by ctid ($2) paired with
-- their id (the last parameter: a ctid names another row after the table is
-- rewritten, say by pg_repack), and are fenced by the lease ($3): a relay
-- whose lease ran out changes nothing that another relay has claimed since.

-- name: MarkSent
-- A sent event moves to msgx_outbox_sent.
WITH d AS (
    DELETE FROM msgx_outbox o USING unnest($2::tid[], $5::bigint[]) AS r(t, i)
    WHERE o.ctid = r.t AND o.id = r.i AND o.target = $1 AND o.locked_until = $3
    RETURNING event_id, id, target, topic, partition_key, event_type, attempts, last_error, created_at
)
INSERT INTO msgx_outbox_sent (event_id, id, target, topic, partition_key, event_type, status, attempts, last_error, created_at, done_at)
SELECT event_id, id, target, topic, partition_key, event_type, 'SENT', attempts, last_error, created_at, $4::timestamptz FROM d

-- name: SentAdvance
-- Per-key lane: MarkSent, and in the same transaction the claim of the next
-- pending event of each sent key whose id is in $6 (deleting a key's head and
-- leasing its successor in one transaction keeps at most one event of the
-- key in flight). The successor is either known from an earlier read ($7:
-- its ctid; the relay checks that the row it gets back has the id it read,
-- $8, and gives back any other) or found by one descent of the key index,
-- which also reads up to $9 - 1 further successors and returns them (kind 1)
-- for the next rounds. Ids of a key only grow in commit order (see Enqueue),
-- so a successor read earlier stays the next one. A successor with a DEAD
-- event of its key before it (see ClaimHeads) is not claimed.
WITH d AS (
    DELETE FROM msgx_outbox o USING unnest($2::tid[], $10::bigint[]) AS r(t, i)
    WHERE o.ctid = r.t AND o.id = r.i AND o.target = $1 AND o.locked_until = $3
    RETURNING o.event_id, o.id, o.target, o.topic, o.partition_key, o.event_type, o.attempts, o.last_error, o.created_at
), h AS (
    INSERT INTO msgx_outbox_sent (event_id, id, target, topic, partition_key, event_type, status, attempts, last_error, created_at, done_at)
    SELECT event_id, id, target, topic, partition_key, event_type, 'SENT', attempts, last_error, created_at, $4::timestamptz FROM d
), adv AS (
    SELECT d.id, d.partition_key AS k, a.st, a.si
    FROM unnest($6::bigint[], $7::tid[], $8::bigint[]) AS a(id, st, si) JOIN d ON d.id = a.id
), probe AS (
    SELECT adv.k, n.t, n.id, n.rn FROM adv CROSS JOIN LATERAL (
        SELECT s.t, s.id, row_number() OVER () AS rn FROM (
            SELECT ctid AS t, id FROM msgx_outbox
            WHERE target = $1 AND status = 'PENDING' AND partition_key = adv.k AND id > adv.id
            ORDER BY partition_key, id LIMIT $9) s) n
    WHERE adv.si = 0
), cand AS (
    SELECT st AS t, si AS id FROM adv WHERE si <> 0
    UNION ALL
    SELECT t, id FROM probe WHERE rn = 1
), c AS (
    SELECT o.ctid FROM msgx_outbox o
    WHERE o.ctid = ANY(ARRAY(SELECT t FROM cand)) AND o.target = $1 AND o.status <> 'DEAD'
      AND o.next_attempt_at <= $4 AND (o.locked_until IS NULL OR o.locked_until <= $4)
      AND (SELECT 1 FROM msgx_outbox d
           WHERE d.target = $1 AND d.status = 'DEAD' AND d.skipped_at IS NULL
             AND d.partition_key = o.partition_key AND d.id < o.id
           LIMIT 1) IS NULL
    FOR UPDATE OF o SKIP LOCKED
), u AS (
    UPDATE msgx_outbox o SET locked_until = $5, attempts = o.attempts + 1,
        lease_expiries = o.lease_expiries + CASE WHEN o.locked_until IS NULL THEN 0 ELSE 1 END
    WHERE o.ctid = ANY(ARRAY(SELECT ctid FROM c)) AND o.target = $1 AND o.status <> 'DEAD'
    RETURNING o.ctid, o.id, o.event_id, o.topic, o.partition_key, o.event_type, o.payload, o.headers, o.attempts, o.created_at, o.lease_expiries
)
SELECT 0 AS kind, ctid, id, event_id, topic, partition_key, event_type, payload, headers, attempts, created_at, lease_expiries FROM u
UNION ALL
SELECT 1, t, id, '', '', k, '', NULL, NULL, rn::int, 'epoch'::timestamptz, 0 FROM probe WHERE rn > 1

-- name: MarkRetry
UPDATE msgx_outbox o SET next_attempt_at = $4, locked_until = NULL, last_error = $5
FROM unnest($2::tid[], $6::bigint[]) AS r(t, i)
WHERE o.ctid = r.t AND o.id = r.i AND o.target = $1 AND o.locked_until = $3

-- name: MarkDead
UPDATE msgx_outbox o SET status = 'DEAD', dead_at = $4, locked_until = NULL, last_error = $5
FROM unnest($2::tid[], $6::bigint[]) AS r(t, i)
WHERE o.ctid = r.t AND o.id = r.i AND o.target = $1 AND o.locked_until = $3

-- name: ClearLease
-- Ends the lease of compacted-lane heads whose key was not sent.
UPDATE msgx_outbox o SET locked_until = NULL
FROM unnest($2::tid[], $4::bigint[]) AS r(t, i)
WHERE o.ctid = r.t AND o.id = r.i AND o.target = $1 AND o.locked_until = $3

-- name: Release
-- Gives claims back without counting the attempt (the relay is stopping).
UPDATE msgx_outbox o SET locked_until = NULL, attempts = GREATEST(o.attempts - 1, 0)
FROM unnest($2::tid[], $4::bigint[]) AS r(t, i)
WHERE o.ctid = r.t AND o.id = r.i AND o.target = $1 AND o.locked_until = $3

-- name: CoverSent
-- Compacted lane: the sent newest events ($2) become SENT and the older
-- pending events of their keys COVERED by them (found per key, in the key
-- index), and each key's state records its newest sent id (see Replay).
-- Returns the statuses written.
WITH rep AS (
    DELETE FROM msgx_outbox o USING unnest($2::tid[], $5::bigint[]) AS r(t, i)
    WHERE o.ctid = r.t AND o.id = r.i AND o.target = $1 AND o.locked_until = $3
    RETURNING o.event_id, o.id, o.target, o.topic, o.partition_key, o.event_type, o.attempts, o.last_error, o.created_at
), ks AS (
    INSERT INTO msgx_outbox_key_state (target, partition_key, sent_id)
    SELECT target, partition_key, id FROM rep WHERE partition_key <> ''
    ON CONFLICT (target, partition_key) DO UPDATE SET sent_id = GREATEST(msgx_outbox_key_state.sent_id, EXCLUDED.sent_id)
), older AS (
    SELECT c.t, rep.id AS covered_by FROM rep CROSS JOIN LATERAL (
        SELECT ctid AS t FROM msgx_outbox
        WHERE target = $1 AND status = 'PENDING' AND partition_key = rep.partition_key AND id < rep.id
        ORDER BY partition_key, id) c
), cov AS (
    DELETE FROM msgx_outbox o USING older
    WHERE o.ctid = older.t
    RETURNING o.event_id, o.id, o.target, o.topic, o.partition_key, o.event_type, o.attempts, o.last_error, o.created_at, older.covered_by
)
INSERT INTO msgx_outbox_sent (event_id, id, target, topic, partition_key, event_type, status, attempts, last_error, created_at, done_at, covered_by)
SELECT event_id, id, target, topic, partition_key, event_type, 'SENT', attempts, last_error, created_at, $4::timestamptz, NULL::bigint FROM rep
UNION ALL
SELECT event_id, id, target, topic, partition_key, event_type, 'COVERED', attempts, last_error, created_at, $4::timestamptz, covered_by FROM cov
RETURNING status

-- name: CoverDead
-- Compacted lane: newest events ($2) that exhausted their attempts become
-- DEAD; they stand for the older pending events of their keys, which become
-- COVERED by them (replaying the dead one sends the key's newest state).
WITH rep AS (
    UPDATE msgx_outbox o SET status = 'DEAD', dead_at = $4, locked_until = NULL, last_error = $5
    FROM unnest($2::tid[], $6::bigint[]) AS r(t, i)
    WHERE o.ctid = r.t AND o.id = r.i AND o.target = $1 AND o.locked_until = $3
    RETURNING o.id, o.partition_key
), older AS (
    SELECT c.t, rep.id AS covered_by FROM rep CROSS JOIN LATERAL (
        SELECT ctid AS t FROM msgx_outbox
        WHERE target = $1 AND status = 'PENDING' AND partition_key = rep.partition_key AND id < rep.id
        ORDER BY partition_key, id) c
), cov AS (
    DELETE FROM msgx_outbox o USING older
    WHERE o.ctid = older.t
    RETURNING o.event_id, o.id, o.target, o.topic, o.partition_key, o.event_type, o.attempts, o.last_error, o.created_at, older.covered_by
)
INSERT INTO msgx_outbox_sent (event_id, id, target, topic, partition_key, event_type, status, attempts, last_error, created_at, done_at, covered_by)
SELECT event_id, id, target, topic, partition_key, event_type, 'COVERED', attempts, last_error, created_at, $4::timestamptz, covered_by FROM cov
RETURNING status

-- name: OldestPending
SELECT created_at FROM msgx_outbox WHERE target = $1 AND status = 'PENDING' ORDER BY id LIMIT 1

-- name: DeleteDone
-- Retention: finished records older than $1, a chunk at a time, skipping the
-- rows another cleaner is deleting (it would otherwise wait for its commit,
-- and then find them gone).
DELETE FROM msgx_outbox_sent WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM msgx_outbox_sent WHERE done_at < $1 ORDER BY done_at LIMIT $2
    FOR UPDATE SKIP LOCKED))

-- name: WatermarkLast
-- One sample of the id watermark (see watermark.go), first statement: the
-- last id handed out.
SELECT CASE WHEN s.is_called THEN s.last_value ELSE s.last_value - 1 END
FROM msgx_outbox_id_seq s

-- name: WatermarkRunning
-- Second statement: the transaction ids of this database's transactions
-- running now, read from the server's process table. Not a snapshot's
-- xmin/xmax: a snapshot's xmax is the last completed transaction id + 1, so
-- a running transaction newer than every completed one is in neither its
-- list nor its xmin, and would look ended. Assigns no transaction id.
SELECT coalesce(array_agg(backend_xid::text::bigint), '{}')
FROM pg_stat_get_activity(NULL)
WHERE backend_xid IS NOT NULL
  AND datid = (SELECT oid FROM pg_database WHERE datname = current_database())

-- name: DBNow
-- The database server's clock, which every relay's leases are read on.
SELECT clock_timestamp()

-- name: ExtendLease
-- Moves the lease of claimed rows forward before a send that could outlast
-- it; returns the rows still held, with their new ctids.
UPDATE msgx_outbox o SET locked_until = $4
FROM unnest($2::tid[], $5::bigint[]) AS r(t, i)
WHERE o.ctid = r.t AND o.id = r.i AND o.target = $1 AND o.locked_until = $3
RETURNING o.id, o.ctid

-- name: Hold
-- Gives claims back without counting the attempt because the target's broker
-- was unavailable (the target's state, not the event's), noting why ($4).
UPDATE msgx_outbox o SET locked_until = NULL, attempts = GREATEST(o.attempts - 1, 0), last_error = $4
FROM unnest($2::tid[], $5::bigint[]) AS r(t, i)
WHERE o.ctid = r.t AND o.id = r.i AND o.target = $1 AND o.locked_until = $3
