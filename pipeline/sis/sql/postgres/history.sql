-- name: HistoryCandidates
-- Flights past retention: their operation day is before the cutoff day, or
-- nothing changed them since the cutoff time (quiet). Rows a message
-- transaction holds are skipped this round.
SELECT flid, status, state_version FROM flight_schd
WHERE operation_day < $1::date OR updated_at < $2
ORDER BY flid LIMIT $3 FOR UPDATE SKIP LOCKED

-- The statements by FLID list ($1) bound the FLIDs by the list's least and
-- greatest too: that keeps their plan on the key index whatever plan the
-- connection cached. A plan made while the tables were nearly empty (a new
-- installation) would otherwise read them whole, batch after batch, once
-- they have grown.

-- name: CopyToHistory
INSERT INTO flight_schd_hst (flid, operation_day, status, state_version, last_msg_id, updated_at, state, tombstoned, archived_at)
SELECT flid, operation_day, status, state_version, last_msg_id, updated_at, state, status <> 'DELETED', $2
FROM flight_schd WHERE flid = ANY($1::text[])
  AND flid BETWEEN (SELECT min(f) FROM unnest($1::text[]) f) AND (SELECT max(f) FROM unnest($1::text[]) f)

-- name: DeleteFlights
DELETE FROM flight_schd WHERE flid = ANY($1::text[])
  AND flid BETWEEN (SELECT min(f) FROM unnest($1::text[]) f) AND (SELECT max(f) FROM unnest($1::text[]) f)

-- name: LogSnapshot
INSERT INTO sis_snap_log (msg_id, kind, operation_day, flights, changed, applied_at)
VALUES ($1, $2, $3::date, $4, $5, $6)

-- name: PurgeSnapLog
-- The oldest entries first, a chunk at a time, found in the applied_at index.
DELETE FROM sis_snap_log WHERE id = ANY(ARRAY(SELECT id FROM sis_snap_log WHERE applied_at < $1 ORDER BY applied_at LIMIT $2))

-- name: PurgeDetailsRoute
DELETE FROM flight_route WHERE flid = ANY($1::text[])
  AND flid BETWEEN (SELECT min(f) FROM unnest($1::text[]) f) AND (SELECT max(f) FROM unnest($1::text[]) f)

-- name: PurgeDetailsGate
DELETE FROM flight_gate WHERE flid = ANY($1::text[])
  AND flid BETWEEN (SELECT min(f) FROM unnest($1::text[]) f) AND (SELECT max(f) FROM unnest($1::text[]) f)

-- name: PurgeDetailsStand
DELETE FROM flight_stand WHERE flid = ANY($1::text[])
  AND flid BETWEEN (SELECT min(f) FROM unnest($1::text[]) f) AND (SELECT max(f) FROM unnest($1::text[]) f)

-- name: PurgeDetailsCheckin
DELETE FROM flight_checkin WHERE flid = ANY($1::text[])
  AND flid BETWEEN (SELECT min(f) FROM unnest($1::text[]) f) AND (SELECT max(f) FROM unnest($1::text[]) f)

-- name: PurgeDetailsCarousel
DELETE FROM flight_carousel WHERE flid = ANY($1::text[])
  AND flid BETWEEN (SELECT min(f) FROM unnest($1::text[]) f) AND (SELECT max(f) FROM unnest($1::text[]) f)

-- name: PurgeDetailsChute
DELETE FROM flight_chute WHERE flid = ANY($1::text[])
  AND flid BETWEEN (SELECT min(f) FROM unnest($1::text[]) f) AND (SELECT max(f) FROM unnest($1::text[]) f)

-- name: PurgeDetailsAirbridge
DELETE FROM flight_airbridge WHERE flid = ANY($1::text[])
  AND flid BETWEEN (SELECT min(f) FROM unnest($1::text[]) f) AND (SELECT max(f) FROM unnest($1::text[]) f)

-- name: PurgeDetailsChocks
DELETE FROM flight_chocks WHERE flid = ANY($1::text[])
  AND flid BETWEEN (SELECT min(f) FROM unnest($1::text[]) f) AND (SELECT max(f) FROM unnest($1::text[]) f)

-- name: PurgeDetailsDelay
DELETE FROM flight_delay WHERE flid = ANY($1::text[])
  AND flid BETWEEN (SELECT min(f) FROM unnest($1::text[]) f) AND (SELECT max(f) FROM unnest($1::text[]) f)

-- name: PurgeDetailsDetail
DELETE FROM flight_detail WHERE flid = ANY($1::text[])
  AND flid BETWEEN (SELECT min(f) FROM unnest($1::text[]) f) AND (SELECT max(f) FROM unnest($1::text[]) f)
