-- SIS flight history (package pipeline/sis). The daily sweep moves flights
-- past retention here before deleting them and their detail rows: the
-- flight row's head and its full state document (the scalar fields and
-- every collection, the detail tables' content), and whether the sweep
-- published a tombstone for it (a flight purged without FDEL).
CREATE TABLE IF NOT EXISTS flight_schd_hst (
    id             BIGSERIAL PRIMARY KEY,
    flid           TEXT COLLATE "C" NOT NULL,
    operation_day  DATE NOT NULL,
    status         TEXT NOT NULL,
    state_version  BIGINT NOT NULL,
    last_msg_id    BIGINT NOT NULL,
    updated_at     TIMESTAMPTZ NOT NULL,
    state          JSON NOT NULL,
    tombstoned     BOOLEAN NOT NULL,
    archived_at    TIMESTAMPTZ NOT NULL
);
CREATE INDEX IF NOT EXISTS flight_schd_hst_flid ON flight_schd_hst (flid);
CREATE INDEX IF NOT EXISTS flight_schd_hst_day ON flight_schd_hst (operation_day);

-- SCHD_SNAP_LOG: one row per schedule snapshot (SCHD DNLD/RESP) applied;
-- kept 90 days.
CREATE TABLE IF NOT EXISTS sis_snap_log (
    id             BIGSERIAL PRIMARY KEY,
    msg_id         BIGINT NOT NULL,
    kind           TEXT NOT NULL,
    operation_day  DATE,
    flights        INTEGER NOT NULL,
    changed        INTEGER NOT NULL,
    applied_at     TIMESTAMPTZ NOT NULL
);
CREATE INDEX IF NOT EXISTS sis_snap_log_applied ON sis_snap_log (applied_at);
