-- SIS flight state (package pipeline/sis). flight_schd holds one row per
-- flight (FLID): its operation day (the local date of SODT, never changed once
-- set), status (ACTIVE or DELETED: FDEL deletes softly), state version (+1 on
-- every message that changed the flight), the last message that changed it,
-- the scalar fields as text columns exactly as the wire carries them (NULL =
-- absent or cleared), the fields no column names (extra) and the full state
-- document the schd events carry (state: JSON, not JSONB, so that it reads
-- back byte for byte as written, which is how a message that changes nothing
-- is told from one that does). The variable-length collections
-- live in the detail tables, one row per item in message order (pos); the
-- sequence attribute an item carries (RTNO, GTNO, ...) is kept in seq, and
-- what no column names in extra.

CREATE TABLE IF NOT EXISTS flight_schd (
    flid           TEXT COLLATE "C" PRIMARY KEY,
    operation_day  DATE NOT NULL,
    status         TEXT NOT NULL,
    state_version  BIGINT NOT NULL,
    last_msg_id    BIGINT NOT NULL,
    updated_at     TIMESTAMPTZ NOT NULL,
    ffid           TEXT,
    alcd           TEXT,
    flno           TEXT,
    mvin           TEXT,
    sodt           TEXT,
    flty           TEXT,
    flin           TEXT,
    acft           TEXT,
    reno           TEXT,
    trml           TEXT,
    maxp           TEXT,
    stnd           TEXT,
    taop           TEXT,
    tafl           TEXT,
    taid           TEXT,
    phag           TEXT,
    fhag           TEXT,
    mhag           TEXT,
    exsc           TEXT,
    exsr           TEXT,
    ftss           TEXT,
    appt           TEXT,
    botm           TEXT,
    cncl           TEXT,
    cobt           TEXT,
    ctot           TEXT,
    egsr           TEXT,
    egst           TEXT,
    eobt           TEXT,
    fint           TEXT,
    iest           TEXT,
    lacl           TEXT,
    naat           TEXT,
    neat           TEXT,
    padt           TEXT,
    pedt           TEXT,
    remc           TEXT,
    runw           TEXT,
    tobt           TEXT,
    vipp           TEXT,
    vipr           TEXT,
    fdiv           TEXT,
    fdiv_ddes      TEXT,
    fdiv_ddir      TEXT,
    flab           TEXT,
    flab_ares      TEXT,
    fret           TEXT,
    fret_reid      TEXT,
    extra          JSONB,
    state          JSON NOT NULL
) WITH (
    -- A flight's row (its state document included, a few kB) is rewritten
    -- by every message that changes the flight: kept in line rather than
    -- compressed into TOAST, with room on its page for the next version so
    -- the update stays heap-only.
    toast_tuple_target = 8160,
    fillfactor = 50
);
CREATE INDEX IF NOT EXISTS flight_schd_day ON flight_schd (operation_day);

-- routes: ROUT (the flight's route) and ERUT (its route as operated); coll keeps them apart
CREATE TABLE IF NOT EXISTS flight_route (
    flid           TEXT COLLATE "C" NOT NULL,
    coll           TEXT COLLATE "C" NOT NULL,
    pos            INTEGER NOT NULL,
    seq            TEXT,
    apcd           TEXT,
    scat           TEXT,
    scdt           TEXT,
    extra          JSONB,
    PRIMARY KEY (flid, coll, pos)
);

-- gates (GTDT)
CREATE TABLE IF NOT EXISTS flight_gate (
    flid           TEXT COLLATE "C" NOT NULL,
    coll           TEXT COLLATE "C" NOT NULL,
    pos            INTEGER NOT NULL,
    seq            TEXT,
    gate           TEXT,
    pgot           TEXT,
    pgct           TEXT,
    gotm           TEXT,
    gctm           TEXT,
    gtyp           TEXT,
    extra          JSONB,
    PRIMARY KEY (flid, coll, pos)
);

-- stands (PSDT)
CREATE TABLE IF NOT EXISTS flight_stand (
    flid           TEXT COLLATE "C" NOT NULL,
    coll           TEXT COLLATE "C" NOT NULL,
    pos            INTEGER NOT NULL,
    seq            TEXT,
    psst           TEXT,
    stst           TEXT,
    stet           TEXT,
    extra          JSONB,
    PRIMARY KEY (flid, coll, pos)
);

-- check-in counters (CKDT)
CREATE TABLE IF NOT EXISTS flight_checkin (
    flid           TEXT COLLATE "C" NOT NULL,
    coll           TEXT COLLATE "C" NOT NULL,
    pos            INTEGER NOT NULL,
    seq            TEXT,
    chkc           TEXT,
    ccls           TEXT,
    pcot           TEXT,
    pcct           TEXT,
    cotm           TEXT,
    cctm           TEXT,
    ctyp           TEXT,
    extra          JSONB,
    PRIMARY KEY (flid, coll, pos)
);

-- baggage carousels (CLDT)
CREATE TABLE IF NOT EXISTS flight_carousel (
    flid           TEXT COLLATE "C" NOT NULL,
    coll           TEXT COLLATE "C" NOT NULL,
    pos            INTEGER NOT NULL,
    seq            TEXT,
    belt           TEXT,
    bcls           TEXT,
    pcot           TEXT,
    pcct           TEXT,
    cotm           TEXT,
    cctm           TEXT,
    btyp           TEXT,
    extra          JSONB,
    PRIMARY KEY (flid, coll, pos)
);

-- baggage chutes (CHDT)
CREATE TABLE IF NOT EXISTS flight_chute (
    flid           TEXT COLLATE "C" NOT NULL,
    coll           TEXT COLLATE "C" NOT NULL,
    pos            INTEGER NOT NULL,
    seq            TEXT,
    chut           TEXT,
    ccls           TEXT,
    pcbt           TEXT,
    pcet           TEXT,
    cbtm           TEXT,
    cetm           TEXT,
    ctyp           TEXT,
    extra          JSONB,
    PRIMARY KEY (flid, coll, pos)
);

-- airbridges (ABTM)
CREATE TABLE IF NOT EXISTS flight_airbridge (
    flid           TEXT COLLATE "C" NOT NULL,
    coll           TEXT COLLATE "C" NOT NULL,
    pos            INTEGER NOT NULL,
    seq            TEXT,
    abdg           TEXT,
    abop           TEXT,
    aotm           TEXT,
    extra          JSONB,
    PRIMARY KEY (flid, coll, pos)
);

-- chocks on/off (CHOT)
CREATE TABLE IF NOT EXISTS flight_chocks (
    flid           TEXT COLLATE "C" NOT NULL,
    coll           TEXT COLLATE "C" NOT NULL,
    pos            INTEGER NOT NULL,
    seq            TEXT,
    chtm           TEXT,
    chid           TEXT,
    chst           TEXT,
    extra          JSONB,
    PRIMARY KEY (flid, coll, pos)
);

-- delays (DELY: attributes CODE, STRT, DURA; the text is the reason)
CREATE TABLE IF NOT EXISTS flight_delay (
    flid           TEXT COLLATE "C" NOT NULL,
    coll           TEXT COLLATE "C" NOT NULL,
    pos            INTEGER NOT NULL,
    seq            TEXT,
    code           TEXT,
    strt           TEXT,
    dura           TEXT,
    reason         TEXT,
    extra          JSONB,
    PRIMARY KEY (flid, coll, pos)
);

-- every other collection (SRVT, PSHT, TIPT, PORT, VIPF and unknown repeated or structured elements), one JSON item per row
CREATE TABLE IF NOT EXISTS flight_detail (
    flid           TEXT COLLATE "C" NOT NULL,
    coll           TEXT COLLATE "C" NOT NULL,
    pos            INTEGER NOT NULL,
    seq            TEXT,
    extra          JSONB NOT NULL,
    PRIMARY KEY (flid, coll, pos)
);
