-- SIS reference data and seasonal schedules (package pipeline/sis).
--
-- sis_ref_master holds one row per reference record: its type (RTYPE: ABDG,
-- AIRL, ...) and key (RKEY: the text of the record's first child element),
-- the record whole as JSON (JSON, not JSONB, so that it reads back byte for
-- byte as written: that is how an unchanged record is told from a changed
-- one), a version (+1 on every change; a deleted record's row is removed, so
-- a record added again starts at 1) and the message that last changed it.
CREATE TABLE IF NOT EXISTS sis_ref_master (
    rtype        TEXT COLLATE "C" NOT NULL,
    rkey         TEXT COLLATE "C" NOT NULL,
    record       JSON NOT NULL,
    version      BIGINT NOT NULL,
    last_msg_id  BIGINT NOT NULL,
    updated_at   TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (rtype, rkey)
);

-- sis_season_schedule holds the latest seasonal schedule (SCHS DNLD/RESP)
-- per season name and airport, the SCHS element whole as JSON; it changes
-- no flight.
CREATE TABLE IF NOT EXISTS sis_season_schedule (
    snam         TEXT COLLATE "C" NOT NULL,
    apcd         TEXT COLLATE "C" NOT NULL,
    sdat         TEXT,
    edat         TEXT,
    recs         INTEGER NOT NULL,
    body         JSON NOT NULL,
    version      BIGINT NOT NULL,
    last_msg_id  BIGINT NOT NULL,
    updated_at   TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (snam, apcd)
);
