-- Reads by a FLID list look each flight up by its key, one index probe per
-- FLID, whatever plan the statistics suggest: a plan cached while the tables
-- were small would otherwise read them whole (flid = ANY(...) on a table of
-- a few pages is cheaper as a sequential scan), and keep doing so as they
-- grow.

-- name: LoadFlights
-- The flights a message touches, locked for the rest of the transaction.
-- The caller passes the FLIDs sorted and distinct, so the rows are locked in
-- key order.
SELECT f.flid, f.operation_day::text, f.status, f.state_version, f.last_msg_id, f.state::text
FROM unnest($1::text[]) AS u(flid)
CROSS JOIN LATERAL (SELECT * FROM flight_schd WHERE flid = u.flid FOR UPDATE) AS f
ORDER BY f.flid

-- name: UpsertFlight
-- The whole row; the operation day of an existing flight is never changed.
INSERT INTO flight_schd (flid, operation_day, status, state_version, last_msg_id, updated_at, ffid, alcd, flno, mvin, sodt, flty, flin, acft, reno, trml, maxp, stnd, taop, tafl, taid, phag, fhag, mhag, exsc, exsr, ftss, appt, botm, cncl, cobt, ctot, egsr, egst, eobt, fint, iest, lacl, naat, neat, padt, pedt, remc, runw, tobt, vipp, vipr, fdiv, fdiv_ddes, fdiv_ddir, flab, flab_ares, fret, fret_reid, extra, state)
VALUES ($1, $2::date, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29, $30, $31, $32, $33, $34, $35, $36, $37, $38, $39, $40, $41, $42, $43, $44, $45, $46, $47, $48, $49, $50, $51, $52, $53, $54, $55::jsonb, $56::json)
ON CONFLICT (flid) DO UPDATE SET
    status = EXCLUDED.status,
    state_version = EXCLUDED.state_version,
    last_msg_id = EXCLUDED.last_msg_id,
    updated_at = EXCLUDED.updated_at,
    ffid = EXCLUDED.ffid,
    alcd = EXCLUDED.alcd,
    flno = EXCLUDED.flno,
    mvin = EXCLUDED.mvin,
    sodt = EXCLUDED.sodt,
    flty = EXCLUDED.flty,
    flin = EXCLUDED.flin,
    acft = EXCLUDED.acft,
    reno = EXCLUDED.reno,
    trml = EXCLUDED.trml,
    maxp = EXCLUDED.maxp,
    stnd = EXCLUDED.stnd,
    taop = EXCLUDED.taop,
    tafl = EXCLUDED.tafl,
    taid = EXCLUDED.taid,
    phag = EXCLUDED.phag,
    fhag = EXCLUDED.fhag,
    mhag = EXCLUDED.mhag,
    exsc = EXCLUDED.exsc,
    exsr = EXCLUDED.exsr,
    ftss = EXCLUDED.ftss,
    appt = EXCLUDED.appt,
    botm = EXCLUDED.botm,
    cncl = EXCLUDED.cncl,
    cobt = EXCLUDED.cobt,
    ctot = EXCLUDED.ctot,
    egsr = EXCLUDED.egsr,
    egst = EXCLUDED.egst,
    eobt = EXCLUDED.eobt,
    fint = EXCLUDED.fint,
    iest = EXCLUDED.iest,
    lacl = EXCLUDED.lacl,
    naat = EXCLUDED.naat,
    neat = EXCLUDED.neat,
    padt = EXCLUDED.padt,
    pedt = EXCLUDED.pedt,
    remc = EXCLUDED.remc,
    runw = EXCLUDED.runw,
    tobt = EXCLUDED.tobt,
    vipp = EXCLUDED.vipp,
    vipr = EXCLUDED.vipr,
    fdiv = EXCLUDED.fdiv,
    fdiv_ddes = EXCLUDED.fdiv_ddes,
    fdiv_ddir = EXCLUDED.fdiv_ddir,
    flab = EXCLUDED.flab,
    flab_ares = EXCLUDED.flab_ares,
    fret = EXCLUDED.fret,
    fret_reid = EXCLUDED.fret_reid,
    extra = EXCLUDED.extra,
    state = EXCLUDED.state

-- name: UpdateFlight
-- A stored flight's row (cheaper than the upsert's conflict path).
UPDATE flight_schd SET
    status = $2,
    state_version = $3,
    last_msg_id = $4,
    updated_at = $5,
    ffid = $6,
    alcd = $7,
    flno = $8,
    mvin = $9,
    sodt = $10,
    flty = $11,
    flin = $12,
    acft = $13,
    reno = $14,
    trml = $15,
    maxp = $16,
    stnd = $17,
    taop = $18,
    tafl = $19,
    taid = $20,
    phag = $21,
    fhag = $22,
    mhag = $23,
    exsc = $24,
    exsr = $25,
    ftss = $26,
    appt = $27,
    botm = $28,
    cncl = $29,
    cobt = $30,
    ctot = $31,
    egsr = $32,
    egst = $33,
    eobt = $34,
    fint = $35,
    iest = $36,
    lacl = $37,
    naat = $38,
    neat = $39,
    padt = $40,
    pedt = $41,
    remc = $42,
    runw = $43,
    tobt = $44,
    vipp = $45,
    vipr = $46,
    fdiv = $47,
    fdiv_ddes = $48,
    fdiv_ddir = $49,
    flab = $50,
    flab_ares = $51,
    fret = $52,
    fret_reid = $53,
    extra = $54::jsonb, state = $55::json
WHERE flid = $1

-- name: SetStatus
UPDATE flight_schd SET status = $2, state_version = $3, last_msg_id = $4, updated_at = $5, state = $6::json WHERE flid = $1

-- name: ReadFlights
-- The flights' rows as stored, for reading their full state from the tables.
SELECT f.flid, f.operation_day::text, f.status, f.state_version, f.last_msg_id, f.ffid, f.alcd, f.flno, f.mvin, f.sodt, f.flty, f.flin, f.acft, f.reno, f.trml, f.maxp, f.stnd, f.taop, f.tafl, f.taid, f.phag, f.fhag, f.mhag, f.exsc, f.exsr, f.ftss, f.appt, f.botm, f.cncl, f.cobt, f.ctot, f.egsr, f.egst, f.eobt, f.fint, f.iest, f.lacl, f.naat, f.neat, f.padt, f.pedt, f.remc, f.runw, f.tobt, f.vipp, f.vipr, f.fdiv, f.fdiv_ddes, f.fdiv_ddir, f.flab, f.flab_ares, f.fret, f.fret_reid, f.extra::text
FROM (SELECT DISTINCT unnest($1::text[])) AS u(flid)
CROSS JOIN LATERAL (SELECT * FROM flight_schd WHERE flid = u.flid OFFSET 0) AS f
ORDER BY f.flid

-- name: DeleteRoute
DELETE FROM flight_route WHERE flid = $1 AND coll = $2

-- name: InsertRoute
INSERT INTO flight_route (flid, coll, pos, seq, apcd, scat, scdt, extra) VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb)

-- name: ReadRoute
SELECT d.flid, d.coll, d.pos, d.seq, d.apcd, d.scat, d.scdt, d.extra::text
FROM (SELECT DISTINCT unnest($1::text[])) AS u(flid)
CROSS JOIN LATERAL (SELECT * FROM flight_route WHERE flid = u.flid OFFSET 0) AS d
ORDER BY d.flid, d.coll, d.pos

-- name: DeleteGate
DELETE FROM flight_gate WHERE flid = $1 AND coll = $2

-- name: InsertGate
INSERT INTO flight_gate (flid, coll, pos, seq, gate, pgot, pgct, gotm, gctm, gtyp, extra) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::jsonb)

-- name: ReadGate
SELECT d.flid, d.coll, d.pos, d.seq, d.gate, d.pgot, d.pgct, d.gotm, d.gctm, d.gtyp, d.extra::text
FROM (SELECT DISTINCT unnest($1::text[])) AS u(flid)
CROSS JOIN LATERAL (SELECT * FROM flight_gate WHERE flid = u.flid OFFSET 0) AS d
ORDER BY d.flid, d.coll, d.pos

-- name: DeleteStand
DELETE FROM flight_stand WHERE flid = $1 AND coll = $2

-- name: InsertStand
INSERT INTO flight_stand (flid, coll, pos, seq, psst, stst, stet, extra) VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb)

-- name: ReadStand
SELECT d.flid, d.coll, d.pos, d.seq, d.psst, d.stst, d.stet, d.extra::text
FROM (SELECT DISTINCT unnest($1::text[])) AS u(flid)
CROSS JOIN LATERAL (SELECT * FROM flight_stand WHERE flid = u.flid OFFSET 0) AS d
ORDER BY d.flid, d.coll, d.pos

-- name: DeleteCheckin
DELETE FROM flight_checkin WHERE flid = $1 AND coll = $2

-- name: InsertCheckin
INSERT INTO flight_checkin (flid, coll, pos, seq, chkc, ccls, pcot, pcct, cotm, cctm, ctyp, extra) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12::jsonb)

-- name: ReadCheckin
SELECT d.flid, d.coll, d.pos, d.seq, d.chkc, d.ccls, d.pcot, d.pcct, d.cotm, d.cctm, d.ctyp, d.extra::text
FROM (SELECT DISTINCT unnest($1::text[])) AS u(flid)
CROSS JOIN LATERAL (SELECT * FROM flight_checkin WHERE flid = u.flid OFFSET 0) AS d
ORDER BY d.flid, d.coll, d.pos

-- name: DeleteCarousel
DELETE FROM flight_carousel WHERE flid = $1 AND coll = $2

-- name: InsertCarousel
INSERT INTO flight_carousel (flid, coll, pos, seq, belt, bcls, pcot, pcct, cotm, cctm, btyp, extra) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12::jsonb)

-- name: ReadCarousel
SELECT d.flid, d.coll, d.pos, d.seq, d.belt, d.bcls, d.pcot, d.pcct, d.cotm, d.cctm, d.btyp, d.extra::text
FROM (SELECT DISTINCT unnest($1::text[])) AS u(flid)
CROSS JOIN LATERAL (SELECT * FROM flight_carousel WHERE flid = u.flid OFFSET 0) AS d
ORDER BY d.flid, d.coll, d.pos

-- name: DeleteChute
DELETE FROM flight_chute WHERE flid = $1 AND coll = $2

-- name: InsertChute
INSERT INTO flight_chute (flid, coll, pos, seq, chut, ccls, pcbt, pcet, cbtm, cetm, ctyp, extra) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12::jsonb)

-- name: ReadChute
SELECT d.flid, d.coll, d.pos, d.seq, d.chut, d.ccls, d.pcbt, d.pcet, d.cbtm, d.cetm, d.ctyp, d.extra::text
FROM (SELECT DISTINCT unnest($1::text[])) AS u(flid)
CROSS JOIN LATERAL (SELECT * FROM flight_chute WHERE flid = u.flid OFFSET 0) AS d
ORDER BY d.flid, d.coll, d.pos

-- name: DeleteAirbridge
DELETE FROM flight_airbridge WHERE flid = $1 AND coll = $2

-- name: InsertAirbridge
INSERT INTO flight_airbridge (flid, coll, pos, seq, abdg, abop, aotm, extra) VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb)

-- name: ReadAirbridge
SELECT d.flid, d.coll, d.pos, d.seq, d.abdg, d.abop, d.aotm, d.extra::text
FROM (SELECT DISTINCT unnest($1::text[])) AS u(flid)
CROSS JOIN LATERAL (SELECT * FROM flight_airbridge WHERE flid = u.flid OFFSET 0) AS d
ORDER BY d.flid, d.coll, d.pos

-- name: DeleteChocks
DELETE FROM flight_chocks WHERE flid = $1 AND coll = $2

-- name: InsertChocks
INSERT INTO flight_chocks (flid, coll, pos, seq, chtm, chid, chst, extra) VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb)

-- name: ReadChocks
SELECT d.flid, d.coll, d.pos, d.seq, d.chtm, d.chid, d.chst, d.extra::text
FROM (SELECT DISTINCT unnest($1::text[])) AS u(flid)
CROSS JOIN LATERAL (SELECT * FROM flight_chocks WHERE flid = u.flid OFFSET 0) AS d
ORDER BY d.flid, d.coll, d.pos

-- name: DeleteDelay
DELETE FROM flight_delay WHERE flid = $1 AND coll = $2

-- name: InsertDelay
INSERT INTO flight_delay (flid, coll, pos, seq, code, strt, dura, reason, extra) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb)

-- name: ReadDelay
SELECT d.flid, d.coll, d.pos, d.seq, d.code, d.strt, d.dura, d.reason, d.extra::text
FROM (SELECT DISTINCT unnest($1::text[])) AS u(flid)
CROSS JOIN LATERAL (SELECT * FROM flight_delay WHERE flid = u.flid OFFSET 0) AS d
ORDER BY d.flid, d.coll, d.pos

-- name: DeleteDetail
DELETE FROM flight_detail WHERE flid = $1 AND coll = $2

-- name: InsertDetail
INSERT INTO flight_detail (flid, coll, pos, seq, extra) VALUES ($1, $2, $3, $4, $5::jsonb)

-- name: ReadDetail
SELECT d.flid, d.coll, d.pos, d.seq, d.extra::text
FROM (SELECT DISTINCT unnest($1::text[])) AS u(flid)
CROSS JOIN LATERAL (SELECT * FROM flight_detail WHERE flid = u.flid OFFSET 0) AS d
ORDER BY d.flid, d.coll, d.pos


-- name: ReplaceRoute
-- One collection's rows replaced in one statement (the
-- arrays hold the new items' columns in position order). The sub-select in
-- WHERE runs before the first row is inserted and reads the whole DELETE,
-- so the old rows are gone before a new one takes their key (a
-- data-modifying WITH nothing reads would run after the INSERT). With empty
-- arrays the collection is just deleted.
WITH gone AS (DELETE FROM flight_route WHERE flid = $1 AND coll = $2 RETURNING 1)
INSERT INTO flight_route (flid, coll, pos, seq, apcd, scat, scdt, extra)
SELECT $1, $2, r.pos, r.seq, r.apcd, r.scat, r.scdt, r.extra::jsonb
FROM unnest($3::int[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[]) AS r(pos, seq, apcd, scat, scdt, extra)
WHERE (SELECT count(*) FROM gone) >= 0

-- name: ReplaceGate
WITH gone AS (DELETE FROM flight_gate WHERE flid = $1 AND coll = $2 RETURNING 1)
INSERT INTO flight_gate (flid, coll, pos, seq, gate, pgot, pgct, gotm, gctm, gtyp, extra)
SELECT $1, $2, r.pos, r.seq, r.gate, r.pgot, r.pgct, r.gotm, r.gctm, r.gtyp, r.extra::jsonb
FROM unnest($3::int[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[]) AS r(pos, seq, gate, pgot, pgct, gotm, gctm, gtyp, extra)
WHERE (SELECT count(*) FROM gone) >= 0

-- name: ReplaceStand
WITH gone AS (DELETE FROM flight_stand WHERE flid = $1 AND coll = $2 RETURNING 1)
INSERT INTO flight_stand (flid, coll, pos, seq, psst, stst, stet, extra)
SELECT $1, $2, r.pos, r.seq, r.psst, r.stst, r.stet, r.extra::jsonb
FROM unnest($3::int[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[]) AS r(pos, seq, psst, stst, stet, extra)
WHERE (SELECT count(*) FROM gone) >= 0

-- name: ReplaceCheckin
WITH gone AS (DELETE FROM flight_checkin WHERE flid = $1 AND coll = $2 RETURNING 1)
INSERT INTO flight_checkin (flid, coll, pos, seq, chkc, ccls, pcot, pcct, cotm, cctm, ctyp, extra)
SELECT $1, $2, r.pos, r.seq, r.chkc, r.ccls, r.pcot, r.pcct, r.cotm, r.cctm, r.ctyp, r.extra::jsonb
FROM unnest($3::int[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[]) AS r(pos, seq, chkc, ccls, pcot, pcct, cotm, cctm, ctyp, extra)
WHERE (SELECT count(*) FROM gone) >= 0

-- name: ReplaceCarousel
WITH gone AS (DELETE FROM flight_carousel WHERE flid = $1 AND coll = $2 RETURNING 1)
INSERT INTO flight_carousel (flid, coll, pos, seq, belt, bcls, pcot, pcct, cotm, cctm, btyp, extra)
SELECT $1, $2, r.pos, r.seq, r.belt, r.bcls, r.pcot, r.pcct, r.cotm, r.cctm, r.btyp, r.extra::jsonb
FROM unnest($3::int[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[]) AS r(pos, seq, belt, bcls, pcot, pcct, cotm, cctm, btyp, extra)
WHERE (SELECT count(*) FROM gone) >= 0

-- name: ReplaceChute
WITH gone AS (DELETE FROM flight_chute WHERE flid = $1 AND coll = $2 RETURNING 1)
INSERT INTO flight_chute (flid, coll, pos, seq, chut, ccls, pcbt, pcet, cbtm, cetm, ctyp, extra)
SELECT $1, $2, r.pos, r.seq, r.chut, r.ccls, r.pcbt, r.pcet, r.cbtm, r.cetm, r.ctyp, r.extra::jsonb
FROM unnest($3::int[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[]) AS r(pos, seq, chut, ccls, pcbt, pcet, cbtm, cetm, ctyp, extra)
WHERE (SELECT count(*) FROM gone) >= 0

-- name: ReplaceAirbridge
WITH gone AS (DELETE FROM flight_airbridge WHERE flid = $1 AND coll = $2 RETURNING 1)
INSERT INTO flight_airbridge (flid, coll, pos, seq, abdg, abop, aotm, extra)
SELECT $1, $2, r.pos, r.seq, r.abdg, r.abop, r.aotm, r.extra::jsonb
FROM unnest($3::int[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[]) AS r(pos, seq, abdg, abop, aotm, extra)
WHERE (SELECT count(*) FROM gone) >= 0

-- name: ReplaceChocks
WITH gone AS (DELETE FROM flight_chocks WHERE flid = $1 AND coll = $2 RETURNING 1)
INSERT INTO flight_chocks (flid, coll, pos, seq, chtm, chid, chst, extra)
SELECT $1, $2, r.pos, r.seq, r.chtm, r.chid, r.chst, r.extra::jsonb
FROM unnest($3::int[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[]) AS r(pos, seq, chtm, chid, chst, extra)
WHERE (SELECT count(*) FROM gone) >= 0

-- name: ReplaceDelay
WITH gone AS (DELETE FROM flight_delay WHERE flid = $1 AND coll = $2 RETURNING 1)
INSERT INTO flight_delay (flid, coll, pos, seq, code, strt, dura, reason, extra)
SELECT $1, $2, r.pos, r.seq, r.code, r.strt, r.dura, r.reason, r.extra::jsonb
FROM unnest($3::int[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[]) AS r(pos, seq, code, strt, dura, reason, extra)
WHERE (SELECT count(*) FROM gone) >= 0

-- name: ReplaceDetail
WITH gone AS (DELETE FROM flight_detail WHERE flid = $1 AND coll = $2 RETURNING 1)
INSERT INTO flight_detail (flid, coll, pos, seq, extra)
SELECT $1, $2, r.pos, r.seq, r.extra::jsonb
FROM unnest($3::int[], $4::text[], $5::text[]) AS r(pos, seq, extra)
WHERE (SELECT count(*) FROM gone) >= 0
