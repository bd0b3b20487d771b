-- name: LoadRefType
-- Every record of a reference type, locked (a snapshot replaces the set).
SELECT rkey, version, record::text FROM sis_ref_master WHERE rtype = $1 ORDER BY rkey FOR UPDATE

-- name: LoadRefKeys
-- The records of a type with the given keys, locked.
SELECT rkey, version, record::text FROM sis_ref_master WHERE rtype = $1 AND rkey = ANY($2::text[]) ORDER BY rkey FOR UPDATE

-- name: UpsertRef
INSERT INTO sis_ref_master (rtype, rkey, record, version, last_msg_id, updated_at)
VALUES ($1, $2, $3::json, $4, $5, $6)
ON CONFLICT (rtype, rkey) DO UPDATE SET record = EXCLUDED.record, version = EXCLUDED.version,
    last_msg_id = EXCLUDED.last_msg_id, updated_at = EXCLUDED.updated_at

-- name: DeleteRef
DELETE FROM sis_ref_master WHERE rtype = $1 AND rkey = $2

-- name: LoadSeason
SELECT version, body::text FROM sis_season_schedule WHERE snam = $1 AND apcd = $2 FOR UPDATE

-- name: UpsertSeason
INSERT INTO sis_season_schedule (snam, apcd, sdat, edat, recs, body, version, last_msg_id, updated_at)
VALUES ($1, $2, $3, $4, $5, $6::json, $7, $8, $9)
ON CONFLICT (snam, apcd) DO UPDATE SET sdat = EXCLUDED.sdat, edat = EXCLUDED.edat, recs = EXCLUDED.recs,
    body = EXCLUDED.body, version = EXCLUDED.version, last_msg_id = EXCLUDED.last_msg_id, updated_at = EXCLUDED.updated_at

-- name: FlightPage
-- The FLIDs of a page of the flight query, in FLID order after the cursor.
SELECT flid FROM flight_schd
WHERE ($1::text = '' OR operation_day = $1::date) AND ($2::text = '' OR status = $2::text)
  AND (cardinality($3::text[]) = 0 OR flid = ANY($3::text[])) AND flid > $4::text
  AND ($6::text = '' OR flno = $6::text)
ORDER BY flid LIMIT $5

-- name: KeepRefExtra
INSERT INTO sis_ref_extra (msg_id, kind, extra, stored_at) VALUES ($1, $2, $3::json, $4)
ON CONFLICT (msg_id) DO UPDATE SET kind = EXCLUDED.kind, extra = EXCLUDED.extra, stored_at = EXCLUDED.stored_at
