-- Route passports (pipeline/routepassport): the newest passport per route,
-- with the source metadata of the record it came from.
CREATE TABLE route_passports (
    route_id         text COLLATE "C" PRIMARY KEY,
    route_name_full  text        NOT NULL,
    request_id       text,
    trace_id         text,
    correlation_id   text,
    created_at       timestamptz,            -- the producer's createdAt, if given
    route_status     text        NOT NULL DEFAULT 'PROCESSED',
    geometry_type    text        NOT NULL,   -- GeoJSON type, e.g. LineString
    geometry_wkt     text        NOT NULL,
    document         jsonb       NOT NULL,   -- the whole record (geometry, properties, unknown members)
    source_topic     text        NOT NULL,
    source_partition integer,                -- NULL where the broker has no log positions
    source_offset    bigint,
    source_key       text,
    source_id        text        NOT NULL,   -- the record's identity, see route_passport_sources
    payload_bytes    integer     NOT NULL,
    received_at      timestamptz NOT NULL,   -- database time of the transaction that stored it
    updated_at       timestamptz NOT NULL
);

-- One row per input record that was ingested: a record delivered again
-- (same topic, partition and offset) finds its row and changes nothing, so
-- it never makes a second pair of events. Rows older than the retention are
-- deleted (processed_at index).
CREATE TABLE route_passport_sources (
    source_id    text COLLATE "C" PRIMARY KEY,
    route_id     text        NOT NULL,
    processed_at timestamptz NOT NULL
);
CREATE INDEX route_passport_sources_processed_at ON route_passport_sources (processed_at);
