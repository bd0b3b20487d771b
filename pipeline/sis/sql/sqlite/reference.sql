-- name: LoadRefType
SELECT rkey, version, record FROM sis_ref_master WHERE rtype = ?1 ORDER BY rkey

-- name: LoadRefKeys
SELECT rkey, version, record FROM sis_ref_master WHERE rtype = ?1 AND rkey IN (SELECT value FROM json_each(?2)) ORDER BY rkey

-- name: UpsertRef
INSERT INTO sis_ref_master (rtype, rkey, record, version, last_msg_id, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6)
ON CONFLICT (rtype, rkey) DO UPDATE SET record = excluded.record, version = excluded.version,
    last_msg_id = excluded.last_msg_id, updated_at = excluded.updated_at

-- name: DeleteRef
DELETE FROM sis_ref_master WHERE rtype = ?1 AND rkey = ?2

-- name: LoadSeason
SELECT version, body FROM sis_season_schedule WHERE snam = ?1 AND apcd = ?2

-- name: UpsertSeason
INSERT INTO sis_season_schedule (snam, apcd, sdat, edat, recs, body, version, last_msg_id, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
ON CONFLICT (snam, apcd) DO UPDATE SET sdat = excluded.sdat, edat = excluded.edat, recs = excluded.recs,
    body = excluded.body, version = excluded.version, last_msg_id = excluded.last_msg_id, updated_at = excluded.updated_at

-- name: FlightPage
SELECT flid FROM flight_schd
WHERE (?1 = '' OR operation_day = ?1) AND (?2 = '' OR status = ?2)
  AND (json_array_length(?3) = 0 OR flid IN (SELECT value FROM json_each(?3))) AND flid > ?4
  AND (?6 = '' OR flno = ?6)
ORDER BY flid LIMIT ?5

-- name: KeepRefExtra
INSERT INTO sis_ref_extra (msg_id, kind, extra, stored_at) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (msg_id) DO UPDATE SET kind = excluded.kind, extra = excluded.extra, stored_at = excluded.stored_at
