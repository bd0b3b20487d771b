-- name: InsertVersion
-- A version of a flight. A row already there under this FLID and version
-- (a flight deleted from flight_schd by hand, then made again) is replaced:
-- the newest message's version is the one the flight has.
INSERT INTO flight_version (flid, version, status, msg_stream, msg_id, seqn, msg_type, msg_styp, sndr, changes, events, recorded_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::json, $11::json, $12)
ON CONFLICT (flid, version) DO UPDATE SET status = EXCLUDED.status, msg_stream = EXCLUDED.msg_stream,
    msg_id = EXCLUDED.msg_id, seqn = EXCLUDED.seqn, msg_type = EXCLUDED.msg_type, msg_styp = EXCLUDED.msg_styp,
    sndr = EXCLUDED.sndr, changes = EXCLUDED.changes, events = EXCLUDED.events, recorded_at = EXCLUDED.recorded_at

-- name: FlightVersions
-- A flight's versions, newest first, before the cursor ($2, 0 for none).
SELECT flid, version, status, msg_stream, msg_id, seqn, msg_type, msg_styp, sndr, changes::text, events::text, recorded_at
FROM flight_version WHERE flid = $1 AND ($2 = 0 OR version < $2)
ORDER BY version DESC LIMIT $3

-- name: MessageVersions
-- The flight versions one message made.
SELECT flid, version, status, msg_stream, msg_id, seqn, msg_type, msg_styp, sndr, changes::text, events::text, recorded_at
FROM flight_version WHERE msg_stream = $1 AND msg_id = $2
ORDER BY flid LIMIT $3

-- name: PurgeVersions
DELETE FROM flight_version WHERE flid = ANY($1::text[])
  AND flid BETWEEN (SELECT min(f) FROM unnest($1::text[]) f) AND (SELECT max(f) FROM unnest($1::text[]) f)
