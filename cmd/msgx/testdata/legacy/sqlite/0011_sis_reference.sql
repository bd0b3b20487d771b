-- SIS reference data and seasonal schedules (package pipeline/sis); see the
-- PostgreSQL migration.
CREATE TABLE IF NOT EXISTS sis_ref_master (
    rtype        TEXT NOT NULL,
    rkey         TEXT NOT NULL,
    record       TEXT NOT NULL,
    version      BIGINT NOT NULL,
    last_msg_id  BIGINT NOT NULL,
    updated_at   INTEGER NOT NULL,
    PRIMARY KEY (rtype, rkey)
);

CREATE TABLE IF NOT EXISTS sis_season_schedule (
    snam         TEXT NOT NULL,
    apcd         TEXT NOT NULL,
    sdat         TEXT,
    edat         TEXT,
    recs         INTEGER NOT NULL,
    body         TEXT NOT NULL,
    version      BIGINT NOT NULL,
    last_msg_id  BIGINT NOT NULL,
    updated_at   INTEGER NOT NULL,
    PRIMARY KEY (snam, apcd)
);
