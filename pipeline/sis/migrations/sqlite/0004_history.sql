-- SIS flight history (package pipeline/sis); see the PostgreSQL migration.
CREATE TABLE IF NOT EXISTS flight_schd_hst (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    flid           TEXT NOT NULL,
    operation_day  TEXT NOT NULL,
    status         TEXT NOT NULL,
    state_version  BIGINT NOT NULL,
    last_msg_id    BIGINT NOT NULL,
    updated_at     INTEGER NOT NULL,
    state          TEXT NOT NULL,
    tombstoned     INTEGER NOT NULL,
    archived_at    INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS flight_schd_hst_flid ON flight_schd_hst (flid);
CREATE INDEX IF NOT EXISTS flight_schd_hst_day ON flight_schd_hst (operation_day);

CREATE TABLE IF NOT EXISTS sis_snap_log (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    msg_id         BIGINT NOT NULL,
    kind           TEXT NOT NULL,
    operation_day  TEXT,
    flights        INTEGER NOT NULL,
    changed        INTEGER NOT NULL,
    applied_at     INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS sis_snap_log_applied ON sis_snap_log (applied_at);
