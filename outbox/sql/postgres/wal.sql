-- The WAL mode (wal.go, walrelay.go): PostgreSQL only.

-- name: WALEmit
-- The events of one Enqueue call as one transactional logical decoding
-- message: decoded only if the transaction commits, in commit order. The
-- prefix names the schema the transaction writes in (see WALPrefix).
SELECT pg_logical_emit_message(true, 'msgx.outbox:' || current_schema(), $1::bytea)

-- name: WALSchema
SELECT current_schema()

-- name: WALHeld
-- The keys of a batch that have events in the table (retrying, DEAD, or held
-- behind one): the batch's later events of these keys go to the table
-- behind them, so that the key's order holds.
SELECT DISTINCT o.target, o.partition_key
FROM msgx_outbox o
JOIN unnest($1::text[], $2::text[]) AS k(target, partition_key)
  ON o.target = k.target AND o.partition_key = k.partition_key
WHERE o.status IN ('PENDING', 'DEAD')

-- name: WALSpill
-- Hands events to the table relay: the ones whose send failed (their first
-- attempt charged, due after the retry delay; DEAD at once when the policy
-- allows one attempt) and the ones held behind them. The per-key advisory
-- locks and the transaction id come first, as in Insert, so that the table
-- lanes' id order is the commit order. An event already handed over (a
-- stream replayed after a restart) is left as it is.
INSERT INTO msgx_outbox (event_id, target, topic, partition_key, event_type, payload, headers, created_at,
                         status, attempts, next_attempt_at, last_error, dead_at)
SELECT e.event_id, e.target, e.topic, e.partition_key, e.event_type, e.payload, e.headers::jsonb, e.created_at,
       e.status, e.attempts, e.next_attempt_at, e.last_error, CASE WHEN e.status = 'DEAD' THEN now() END
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bytea[], $7::text[], $8::timestamptz[],
            $9::text[], $10::int[], $11::timestamptz[], $12::text[])
     AS e(event_id, target, topic, partition_key, event_type, payload, headers, created_at,
          status, attempts, next_attempt_at, last_error)
WHERE (SELECT count(pg_advisory_xact_lock(k)) FROM unnest($13::bigint[]) AS k) >= 0
  AND pg_current_xact_id() IS NOT NULL
ON CONFLICT (event_id) DO NOTHING

-- name: WALSlot
-- The slot's state: whether a relay streams from it (and which backend),
-- its confirmed position, the WAL it retains, and whether PostgreSQL has
-- invalidated it (wal_status lost: max_slot_wal_keep_size was exceeded).
SELECT s.active, coalesce(s.active_pid, 0), coalesce(s.confirmed_flush_lsn::text, ''),
       coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn), 0)::bigint,
       coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn), 0)::bigint,
       coalesce(s.wal_status, ''), s.plugin
FROM pg_replication_slots s
WHERE s.slot_name = $1 AND s.database = current_database()

-- name: WALPublication
SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)

-- name: WALPrerequisites
-- What the WAL mode needs of the server and of the connecting role.
SELECT current_setting('wal_level'), (SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user),
       current_setting('max_replication_slots')::int, current_setting('max_wal_senders')::int
