-- SIS flight state (package pipeline/sis); see the PostgreSQL migration.

CREATE TABLE IF NOT EXISTS flight_schd (
    flid           TEXT PRIMARY KEY,
    operation_day  TEXT NOT NULL,
    status         TEXT NOT NULL,
    state_version  BIGINT NOT NULL,
    last_msg_id    BIGINT NOT NULL,
    updated_at     INTEGER NOT NULL,
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
    extra          TEXT,
    state          TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS flight_schd_day ON flight_schd (operation_day);

-- routes: ROUT (the flight's route) and ERUT (its route as operated); coll keeps them apart
CREATE TABLE IF NOT EXISTS flight_route (
    flid           TEXT NOT NULL,
    coll           TEXT NOT NULL,
    pos            INTEGER NOT NULL,
    seq            TEXT,
    apcd           TEXT,
    scat           TEXT,
    scdt           TEXT,
    extra          TEXT,
    PRIMARY KEY (flid, coll, pos)
);

-- gates (GTDT)
CREATE TABLE IF NOT EXISTS flight_gate (
    flid           TEXT NOT NULL,
    coll           TEXT NOT NULL,
    pos            INTEGER NOT NULL,
    seq            TEXT,
    gate           TEXT,
    pgot           TEXT,
    pgct           TEXT,
    gotm           TEXT,
    gctm           TEXT,
    gtyp           TEXT,
    extra          TEXT,
    PRIMARY KEY (flid, coll, pos)
);

-- stands (PSDT)
CREATE TABLE IF NOT EXISTS flight_stand (
    flid           TEXT NOT NULL,
    coll           TEXT NOT NULL,
    pos            INTEGER NOT NULL,
    seq            TEXT,
    psst           TEXT,
    stst           TEXT,
    stet           TEXT,
    extra          TEXT,
    PRIMARY KEY (flid, coll, pos)
);

-- check-in counters (CKDT)
CREATE TABLE IF NOT EXISTS flight_checkin (
    flid           TEXT NOT NULL,
    coll           TEXT NOT NULL,
    pos            INTEGER NOT NULL,
    seq            TEXT,
    chkc           TEXT,
    ccls           TEXT,
    pcot           TEXT,
    pcct           TEXT,
    cotm           TEXT,
    cctm           TEXT,
    ctyp           TEXT,
    extra          TEXT,
    PRIMARY KEY (flid, coll, pos)
);

-- baggage carousels (CLDT)
CREATE TABLE IF NOT EXISTS flight_carousel (
    flid           TEXT NOT NULL,
    coll           TEXT NOT NULL,
    pos            INTEGER NOT NULL,
    seq            TEXT,
    belt           TEXT,
    bcls           TEXT,
    pcot           TEXT,
    pcct           TEXT,
    cotm           TEXT,
    cctm           TEXT,
    btyp           TEXT,
    extra          TEXT,
    PRIMARY KEY (flid, coll, pos)
);

-- baggage chutes (CHDT)
CREATE TABLE IF NOT EXISTS flight_chute (
    flid           TEXT NOT NULL,
    coll           TEXT NOT NULL,
    pos            INTEGER NOT NULL,
    seq            TEXT,
    chut           TEXT,
    ccls           TEXT,
    pcbt           TEXT,
    pcet           TEXT,
    cbtm           TEXT,
    cetm           TEXT,
    ctyp           TEXT,
    extra          TEXT,
    PRIMARY KEY (flid, coll, pos)
);

-- airbridges (ABTM)
CREATE TABLE IF NOT EXISTS flight_airbridge (
    flid           TEXT NOT NULL,
    coll           TEXT NOT NULL,
    pos            INTEGER NOT NULL,
    seq            TEXT,
    abdg           TEXT,
    abop           TEXT,
    aotm           TEXT,
    extra          TEXT,
    PRIMARY KEY (flid, coll, pos)
);

-- chocks on/off (CHOT)
CREATE TABLE IF NOT EXISTS flight_chocks (
    flid           TEXT NOT NULL,
    coll           TEXT NOT NULL,
    pos            INTEGER NOT NULL,
    seq            TEXT,
    chtm           TEXT,
    chid           TEXT,
    chst           TEXT,
    extra          TEXT,
    PRIMARY KEY (flid, coll, pos)
);

-- delays (DELY: attributes CODE, STRT, DURA; the text is the reason)
CREATE TABLE IF NOT EXISTS flight_delay (
    flid           TEXT NOT NULL,
    coll           TEXT NOT NULL,
    pos            INTEGER NOT NULL,
    seq            TEXT,
    code           TEXT,
    strt           TEXT,
    dura           TEXT,
    reason         TEXT,
    extra          TEXT,
    PRIMARY KEY (flid, coll, pos)
);

-- every other collection (SRVT, PSHT, TIPT, PORT, VIPF and unknown repeated or structured elements), one JSON item per row
CREATE TABLE IF NOT EXISTS flight_detail (
    flid           TEXT NOT NULL,
    coll           TEXT NOT NULL,
    pos            INTEGER NOT NULL,
    seq            TEXT,
    extra          TEXT NOT NULL,
    PRIMARY KEY (flid, coll, pos)
);
