-- name: InsertVersion
-- A version of a flight: a plain insert (no arbiter index to check first);
-- a flight made anew forgets the versions of an earlier one of its FLID
-- first (ForgetVersions).
INSERT INTO flight_version (flid, version, status, msg_stream, msg_id, seqn, msg_type, msg_styp, sndr, changes, events, recorded_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)

-- name: ForgetVersions
-- The versions of an earlier flight of this FLID (deleted from flight_schd
-- by hand), when the flight is made again from version 1.
DELETE FROM flight_version WHERE flid = $1

-- name: FlightVersions
-- A flight's versions, newest first, before the cursor ($2, 0 for none).
SELECT flid, version, status, msg_stream, msg_id, seqn, msg_type, msg_styp, sndr, changes, events, recorded_at
FROM flight_version WHERE flid = $1 AND ($2 = 0 OR version < $2)
ORDER BY version DESC LIMIT $3

-- name: MessageVersions
-- The flight versions one message made.
SELECT flid, version, status, msg_stream, msg_id, seqn, msg_type, msg_styp, sndr, changes, events, recorded_at
FROM flight_version WHERE msg_stream = $1 AND msg_id = $2
ORDER BY flid LIMIT $3

-- name: PurgeVersions
DELETE FROM flight_version WHERE flid = ANY($1::text[])
  AND flid BETWEEN (SELECT min(f) FROM unnest($1::text[]) f) AND (SELECT max(f) FROM unnest($1::text[]) f)
