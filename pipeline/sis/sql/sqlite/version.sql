-- name: InsertVersion
INSERT INTO flight_version (flid, version, status, msg_stream, msg_id, seqn, msg_type, msg_styp, sndr, changes, events, recorded_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)

-- name: ForgetVersions
DELETE FROM flight_version WHERE flid = ?1

-- name: FlightVersions
SELECT flid, version, status, msg_stream, msg_id, seqn, msg_type, msg_styp, sndr, changes, events, recorded_at
FROM flight_version WHERE flid = ?1 AND (?2 = 0 OR version < ?2)
ORDER BY version DESC LIMIT ?3

-- name: MessageVersions
SELECT flid, version, status, msg_stream, msg_id, seqn, msg_type, msg_styp, sndr, changes, events, recorded_at
FROM flight_version WHERE msg_stream = ?1 AND msg_id = ?2
ORDER BY flid LIMIT ?3

-- name: PurgeVersions
DELETE FROM flight_version WHERE flid IN (SELECT value FROM json_each(?1))
