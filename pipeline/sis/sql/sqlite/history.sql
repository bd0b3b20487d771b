-- name: HistoryCandidates
-- Flights past retention: their operation day is before the cutoff day, or
-- nothing changed them since the cutoff time (quiet). Rows a message
-- transaction holds are skipped this round.
SELECT flid, status, state_version FROM flight_schd
WHERE operation_day < ?1 OR updated_at < ?2
ORDER BY flid LIMIT ?3

-- name: CopyToHistory
INSERT INTO flight_schd_hst (flid, operation_day, status, state_version, last_msg_id, updated_at, state, tombstoned, archived_at)
SELECT flid, operation_day, status, state_version, last_msg_id, updated_at, state, (status <> 'DELETED'), ?2
FROM flight_schd WHERE flid IN (SELECT value FROM json_each(?1))

-- name: DeleteFlights
DELETE FROM flight_schd WHERE flid IN (SELECT value FROM json_each(?1))

-- name: LogSnapshot
INSERT INTO sis_snap_log (msg_id, kind, operation_day, flights, changed, applied_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6)

-- name: PurgeSnapLog
DELETE FROM sis_snap_log WHERE id IN (SELECT id FROM sis_snap_log WHERE applied_at < ?1 ORDER BY id LIMIT ?2)

-- name: PurgeDetailsRoute
DELETE FROM flight_route WHERE flid IN (SELECT value FROM json_each(?1))

-- name: PurgeDetailsGate
DELETE FROM flight_gate WHERE flid IN (SELECT value FROM json_each(?1))

-- name: PurgeDetailsStand
DELETE FROM flight_stand WHERE flid IN (SELECT value FROM json_each(?1))

-- name: PurgeDetailsCheckin
DELETE FROM flight_checkin WHERE flid IN (SELECT value FROM json_each(?1))

-- name: PurgeDetailsCarousel
DELETE FROM flight_carousel WHERE flid IN (SELECT value FROM json_each(?1))

-- name: PurgeDetailsChute
DELETE FROM flight_chute WHERE flid IN (SELECT value FROM json_each(?1))

-- name: PurgeDetailsAirbridge
DELETE FROM flight_airbridge WHERE flid IN (SELECT value FROM json_each(?1))

-- name: PurgeDetailsChocks
DELETE FROM flight_chocks WHERE flid IN (SELECT value FROM json_each(?1))

-- name: PurgeDetailsDelay
DELETE FROM flight_delay WHERE flid IN (SELECT value FROM json_each(?1))

-- name: PurgeDetailsDetail
DELETE FROM flight_detail WHERE flid IN (SELECT value FROM json_each(?1))
