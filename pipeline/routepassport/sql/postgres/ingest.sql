-- name: ClaimSources
-- The records of a batch that were not ingested before; the transaction's
-- time (the database clock) comes back with them.
INSERT INTO route_passport_sources (source_id, route_id, processed_at)
SELECT s.source_id, s.route_id, now()
FROM unnest($1::text[], $2::text[]) AS s(source_id, route_id)
ON CONFLICT (source_id) DO NOTHING
RETURNING source_id, now()

-- name: Upsert
-- One row per route (the caller keeps the last record of a route in a
-- batch), in route order so that concurrent batches lock rows in one order.
INSERT INTO route_passports (route_id, route_name_full, request_id, trace_id, correlation_id, created_at,
    geometry_type, geometry_wkt, document,
    source_topic, source_partition, source_offset, source_key, source_id, payload_bytes, received_at, updated_at)
SELECT r.route_id, r.route_name_full, r.request_id, r.trace_id, r.correlation_id, r.created_at,
    r.geometry_type, r.geometry_wkt, r.document::json,
    r.source_topic, r.source_partition, r.source_offset, r.source_key, r.source_id, r.payload_bytes, now(), now()
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[],
    $7::text[], $8::text[], $9::text[],
    $10::text[], $11::integer[], $12::bigint[], $13::text[], $14::text[], $15::integer[])
    AS r(route_id, route_name_full, request_id, trace_id, correlation_id, created_at,
    geometry_type, geometry_wkt, document,
    source_topic, source_partition, source_offset, source_key, source_id, payload_bytes)
ORDER BY r.route_id
ON CONFLICT (route_id) DO UPDATE SET
    route_name_full = EXCLUDED.route_name_full, request_id = EXCLUDED.request_id,
    trace_id = EXCLUDED.trace_id, correlation_id = EXCLUDED.correlation_id, created_at = EXCLUDED.created_at,
    route_status = 'PROCESSED',
    geometry_type = EXCLUDED.geometry_type, geometry_wkt = EXCLUDED.geometry_wkt, document = EXCLUDED.document,
    source_topic = EXCLUDED.source_topic, source_partition = EXCLUDED.source_partition,
    source_offset = EXCLUDED.source_offset, source_key = EXCLUDED.source_key, source_id = EXCLUDED.source_id,
    payload_bytes = EXCLUDED.payload_bytes, received_at = EXCLUDED.received_at, updated_at = EXCLUDED.updated_at

-- name: CleanSources
-- The oldest entries past the retention ($1 seconds), $2 at a time, found in
-- the processed_at index and deleted by key, whatever plan is cached (one
-- made while the table was empty would read it whole every time).
DELETE FROM route_passport_sources
WHERE source_id = ANY(ARRAY(SELECT source_id FROM route_passport_sources
    WHERE processed_at < now() - make_interval(secs => $1::double precision) ORDER BY processed_at LIMIT $2))
