package sis_test

import (
	"context"
	"encoding/json"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"golang.org/x/text/encoding/simplifiedchinese"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/pipeline/sis"
	"github.com/msgx/msgx/pipeline/sis/sisxml"
	"github.com/msgx/msgx/pipeline/sis/traffic"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// loaded is a harness whose store holds the flights of the real DNLD (15,
// 16) and two composed ones (121112312, 7610151) for the other FLOP
// fixtures.
func loaded(t *testing.T, db *store.DB) *harness {
	t.Helper()
	h := newHarness(t, db, sis.Config{})
	if out := h.ok(fixture(t, "SCHD_DNLD_1.xml")); out != inbox.Done() {
		t.Fatalf("DNLD: %+v", out)
	}
	if out := h.ok(adft(900001, "121112312", "7610151")); out != inbox.Done() {
		t.Fatalf("ADFT: %+v", out)
	}
	return h
}

// TestEveryFixtureIsHandled processes every bundled message once, in name
// order after the schedule (FDEL last): each ends as the spec says for its
// kind, and the state stored in the tables equals the state document the
// events are built from.
func TestEveryFixtureIsHandled(t *testing.T) {
	storetest.Each(t, []store.Line{sis.Schema()}, func(t *testing.T, db *store.DB) {
		h := loaded(t, db)
		names := traffic.Names()
		slices.SortStableFunc(names, func(a, b string) int {
			return boolInt(strings.HasPrefix(a, "FLOP_FDEL")) - boolInt(strings.HasPrefix(b, "FLOP_FDEL"))
		})
		counts := map[string]int{}
		for _, name := range names {
			if name == "SCHD_DNLD_1.xml" {
				continue
			}
			typ, _, _ := strings.Cut(name, "_")
			out, err := h.process(fixture(t, name))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			want := inbox.Done()
			switch {
			case typ == "REGN":
				want = inbox.Skip("ignored:" + strings.Join(strings.Split(strings.TrimSuffix(name, ".xml"), "_")[:2], "/"))
			}
			if out != want {
				t.Errorf("%s: %+v, want %+v", name, out, want)
			}
			counts[string(out.Status)]++
		}
		if counts["SUCCEEDED"] != 166 || counts["SKIPPED"] != 5 {
			t.Errorf("outcomes %v", counts)
		}
		flids := []string{"15", "16", "121112312", "7610151"}
		fromTables, err := sis.Read(context.Background(), db, flids)
		if err != nil {
			t.Fatal(err)
		}
		byID := map[string]sis.SchdEvent{}
		for _, e := range h.events() {
			if e.Target == sis.TargetSchd && e.Type == "UPSERT" {
				byID[e.Key] = schdState(t, e)
			}
		}
		for _, id := range flids {
			f := fromTables[id]
			s := byID[id]
			if f == nil || s.FLID != id {
				t.Fatalf("flight %s: stored %v, last event %+v", id, f, s)
			}
			if id == "15" {
				if f.Status != sis.StatusDeleted {
					t.Errorf("15 not deleted after FDEL: %s", f.Status)
				}
				continue // its last schd event is the tombstone
			}
			if f.Version != s.StateVersion || !reflect.DeepEqual(f.Fields, s.Fields) || !reflect.DeepEqual(norm(f.Collections), norm(s.Collections)) {
				t.Errorf("flight %s: tables and last state event differ:\ntables %+v\nevent  %+v", id, f, s)
			}
		}
	})
}

func norm(m map[string][]sis.Item) map[string][]sis.Item {
	if len(m) == 0 {
		return nil
	}
	return m
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestFlopSetsAndClearsScalars(t *testing.T) {
	storetest.Each(t, []store.Line{sis.Schema()}, func(t *testing.T, db *store.DB) {
		h := loaded(t, db)
		h.ok(withSeq(fixture(t, "FLOP_APPT_1.xml"), 1))
		if got := h.flight("15").Fields["APPT"]; got != "12DEC031350" {
			t.Fatalf("APPT %q", got)
		}
		h.ok(withSeq(fixture(t, "FLOP_APPT_2.xml"), 2)) // <APPT></APPT> clears
		if _, ok := h.flight("15").Fields["APPT"]; ok {
			t.Fatal("APPT not cleared by an empty element")
		}
		// HNAG sets three fields; the DNLD had set them all to 110009.
		h.ok(withSeq(fixture(t, "FLOP_HNAG_1.xml"), 3))
		f := h.flight("15")
		if f.Fields["PHAG"] != "22313" || f.Fields["FHAG"] != "234523" || f.Fields["MHAG"] != "234523" {
			t.Fatalf("HNAG: %v", f.Fields)
		}
		h.ok(withSeq(fixture(t, "FLOP_HNAG_2.xml"), 4))
		f = h.flight("15")
		for _, k := range []string{"PHAG", "FHAG", "MHAG"} {
			if _, ok := f.Fields[k]; ok {
				t.Fatalf("HNAG_2 left %s", k)
			}
		}
		// Attributes of a scalar are fields of their own.
		h.ok(withSeq(fixture(t, "FLOP_FDIV_1.xml"), 5))
		f = h.flight("15")
		if f.Fields["FDIV"] != "INCLEMENT WEATHER" || f.Fields["FDIV_DDES"] != "HKG" || f.Fields["FDIV_DDIR"] != "TO" {
			t.Fatalf("FDIV: %v", f.Fields)
		}
		h.ok(withSeq(fixture(t, "FLOP_FDIV_2.xml"), 6)) // DDES=""
		if _, ok := h.flight("15").Fields["FDIV_DDES"]; ok {
			t.Fatal("FDIV DDES not cleared")
		}
		// TOBT_1 carries no TOBT element at all: the field is cleared.
		h.ok(withSeq(replace(t, fixture(t, "FLOP_TOBT_1.xml"), "</FLOP>", "<TOBT>10AUG181840</TOBT></FLOP>"), 8))
		if h.flight("121112312").Fields["TOBT"] != "10AUG181840" {
			t.Fatalf("TOBT not set: %v", h.flight("121112312").Fields)
		}
		h.ok(withSeq(fixture(t, "FLOP_TOBT_1.xml"), 9))
		if _, ok := h.flight("121112312").Fields["TOBT"]; ok {
			t.Fatal("TOBT not cleared by its absence")
		}
	})
}

// TestSameGateTwiceIsOneChange: the second identical GTDT changes nothing:
// no version, no event.
func TestSameGateTwiceIsOneChange(t *testing.T) {
	storetest.Each(t, []store.Line{sis.Schema()}, func(t *testing.T, db *store.DB) {
		h := loaded(t, db)
		before := len(h.events())
		v0 := h.flight("121112312").Version
		h.ok(withSeq(fixture(t, "FLOP_GTDT_1.xml"), 1))
		h.ok(withSeq(fixture(t, "FLOP_GTDT_1.xml"), 2))
		f := h.flight("121112312")
		if f.Version != v0+1 {
			t.Fatalf("version %d, want %d", f.Version, v0+1)
		}
		gates := f.Collections["GTDT"]
		if len(gates) != 3 || gates[0]["GATE"] != "G28" || gates[0]["@GTNO"] != "1" || gates[2]["GATE"] != "G23" {
			t.Fatalf("gates %v", gates)
		}
		if _, ok := gates[1]["GOTM"]; ok {
			t.Fatalf("gate 2 has no GOTM in the message: %v", gates[1])
		}
		evs := h.events()[before:]
		if got := eventIDs(evs); !slices.Equal(got, []string{"sis:3:msg:121112312", "sis:3:schd:121112312"}) {
			t.Fatalf("events %v", got)
		}
		// A smaller gate list replaces the whole collection.
		g := string(fixture(t, "FLOP_GTDT_1.xml"))
		one := g[:strings.Index(g, `<GTDT GTNO="2">`)] + g[strings.LastIndex(g, "</GTDT>")+len("</GTDT>"):]
		h.ok(withSeq([]byte(one), 3))
		if got := h.flight("121112312").Collections["GTDT"]; len(got) != 1 {
			t.Fatalf("gates after a one-gate GTDT: %v", got)
		}
	})
}

func TestCollectionsClearAndRoutesStayApart(t *testing.T) {
	storetest.Each(t, []store.Line{sis.Schema()}, func(t *testing.T, db *store.DB) {
		h := loaded(t, db)
		f := h.flight("16")
		if len(f.Collections["ROUT"]) != 1 || len(f.Collections["ERUT"]) != 2 {
			t.Fatalf("DNLD routes: %v", f.Collections)
		}
		h.ok(withSeq(fixture(t, "FLOP_ERUT_1.xml"), 1))
		f = h.flight("16")
		if len(f.Collections["ROUT"]) != 1 || len(f.Collections["ERUT"]) != 3 || f.Collections["ERUT"][2]["APCD"] != "BAV" {
			t.Fatalf("after ERUT: %v", f.Collections)
		}
		h.ok(withSeq(fixture(t, "FLOP_DELY_1.xml"), 2))
		d := h.flight("15").Collections["DELY"]
		if len(d) != 3 || d[1]["@CODE"] != "XX" || d[1]["#text"] != "XXXXXXX" || d[1]["@DURA"] != "0201" {
			t.Fatalf("delays %v", d)
		}
		h.ok(withSeq(fixture(t, "FLOP_DELY_2.xml"), 3)) // <DELY></DELY>
		if d := h.flight("15").Collections["DELY"]; len(d) != 0 {
			t.Fatalf("delays not cleared: %v", d)
		}
		h.ok(withSeq(fixture(t, "FLOP_SRVT_2.xml"), 4)) // the generic table
		s := h.flight("15").Collections["SRVT"]
		if len(s) != 3 || s[0]["SARR"] != "由于机器问题" || s[2]["SRPR"] != "107007" {
			t.Fatalf("services %v", s)
		}
	})
}

func TestFlopOnUnknownFlightIsSkipped(t *testing.T) {
	storetest.Each(t, []store.Line{sis.Schema()}, func(t *testing.T, db *store.DB) {
		h := newHarness(t, db, sis.Config{})
		if out := h.ok(fixture(t, "FLOP_GTDT_1.xml")); out != inbox.Skip("no-match:unknown FLID 121112312") {
			t.Fatalf("%+v", out)
		}
		if out := h.ok(fixture(t, "FLOP_FDEL_1.xml")); out != inbox.Skip("no-match:unknown FLID 15") {
			t.Fatalf("%+v", out)
		}
		if n := len(h.events()); n != 0 {
			t.Fatalf("%d events", n)
		}
	})
}

func TestFdelDeletesSoftlyWithATombstone(t *testing.T) {
	storetest.Each(t, []store.Line{sis.Schema()}, func(t *testing.T, db *store.DB) {
		h := loaded(t, db)
		before := len(h.events())
		h.ok(fixture(t, "FLOP_FDEL_1.xml"))
		f := h.flight("15")
		if f.Status != sis.StatusDeleted || f.Version != 2 || f.Fields["FLNO"] != "YG9028" || len(f.Collections["ERUT"]) != 2 {
			t.Fatalf("after FDEL: %+v", f)
		}
		evs := h.events()[before:]
		if len(evs) != 2 || evs[0].Target != sis.TargetMsg || evs[1].Type != "TOMBSTONE" || evs[1].Key != "15" {
			t.Fatalf("events %+v", evs)
		}
		if out := h.ok(withSeq(fixture(t, "FLOP_ACFT_1.xml"), 7)); out != inbox.Skip("no-match:FLID 15 is deleted") {
			t.Fatalf("FLOP on a deleted flight: %+v", out)
		}
		// A schedule that carries it again brings it back.
		h.ok(withSeq(fixture(t, "SCHD_DNLD_1.xml"), 8))
		if f := h.flight("15"); f.Status != sis.StatusActive || f.Version != 3 {
			t.Fatalf("after the DNLD again: %+v", f)
		}
	})
}

func TestScheduleIsValidatedAsAWhole(t *testing.T) {
	storetest.Each(t, []store.Line{sis.Schema()}, func(t *testing.T, db *store.DB) {
		h := newHarness(t, db, sis.Config{})
		dnld := fixture(t, "SCHD_DNLD_1.xml")
		err := h.fails(replace(t, dnld, "<RECS>2</RECS>", "<RECS>3</RECS>"), inbox.Protocol)
		if !strings.Contains(err.Error(), "RECS says 3 records, the packet carries 2 FLTR") {
			t.Fatalf("reason %v", err)
		}
		err = h.fails(replace(t, dnld, "<SODT>23JAN210325</SODT>", "<SODT>24JAN210325</SODT>"), inbox.Protocol)
		if !strings.Contains(err.Error(), "crosses operation days: FLID 15 is on 2021-01-23, FLID 16 on 2021-01-24") {
			t.Fatalf("reason %v", err)
		}
		h.fails(replace(t, dnld, "<FLID>16</FLID>", "<FLID></FLID>"), inbox.Protocol)
		h.fails(replace(t, dnld, "<FLID>16</FLID>", "<FLID>15</FLID>"), inbox.Protocol)
		if f := h.flight("15"); f != nil || len(h.events()) != 0 {
			t.Fatalf("a rejected packet wrote %+v", f)
		}
		// Flight 16 stored under another day: the whole packet is rejected.
		h.ok(withSeq(replace(t, replace(t, dnld, "<SODT>23JAN210535</SODT>", "<SODT>22JAN210535</SODT>"), "<SODT>23JAN210325</SODT>", "<SODT>22JAN210325</SODT>"), 5))
		err = h.fails(withSeq(replace(t, replace(t, dnld, "<FLID>15</FLID>", "<FLID>17</FLID>"), "<ACFT>733</ACFT>", "<ACFT>320</ACFT>"), 6), inbox.Protocol)
		if !strings.Contains(err.Error(), "FLID 16 is stored under operation day 2021-01-22, the packet says 2021-01-23") {
			t.Fatalf("reason %v", err)
		}
		if f := h.flight("17"); f != nil {
			t.Fatalf("17 written by a rejected packet")
		}
		if f := h.flight("16"); f.Version != 1 || f.Fields["ACFT"] != "733" {
			t.Fatalf("16 changed by a rejected packet: %+v", f)
		}
	})
}

func TestScheduleMergesAndAgainChangesNothing(t *testing.T) {
	storetest.Each(t, []store.Line{sis.Schema()}, func(t *testing.T, db *store.DB) {
		h := newHarness(t, db, sis.Config{})
		dnld := fixture(t, "SCHD_DNLD_1.xml")
		h.ok(dnld)
		h.ok(withSeq(fixture(t, "FLOP_CNCL_1.xml"), 2))
		n := len(h.events())
		h.ok(withSeq(dnld, 3)) // the same snapshot again
		if len(h.events()) != n {
			t.Fatalf("an unchanged snapshot published %d events", len(h.events())-n)
		}
		f := h.flight("15")
		if f.Version != 2 || f.Fields["CNCL"] != "15DEC031722" || f.LastMsgID != 2 {
			t.Fatalf("after the snapshot again: %+v", f)
		}
		// Flights a snapshot does not carry are kept.
		only16 := replace(t, dnld, "<RECS>2</RECS>", "<RECS>1</RECS>")
		s := string(only16)
		s = s[:strings.Index(s, "<FLTR>")] + s[strings.Index(s, "</FLTR>")+len("</FLTR>"):]
		h.ok(withSeq([]byte(s), 4))
		if h.flight("15") == nil {
			t.Fatal("a flight the snapshot did not carry was removed")
		}
	})
}

func TestRequestGuardAndIgnoreList(t *testing.T) {
	storetest.Each(t, []store.Line{sis.Schema()}, func(t *testing.T, db *store.DB) {
		resp := replace(t, fixture(t, "SCHD_DNLD_1.xml"), "<STYP>DNLD</STYP>", "<STYP>RESP</STYP>")
		guarded := newHarness(t, db, sis.Config{RequestGuard: true, Ignore: []string{"FLOP/CNCL"}})
		if out := guarded.ok(resp); out != inbox.Skip("no-match:no-open-request") {
			t.Fatalf("guarded RESP: %+v", out)
		}
		if out := guarded.ok(fixture(t, "REGN_ADD_1.xml")); out != inbox.Done() {
			t.Fatalf("REGN with a list without it: %+v", out)
		}
		h := newHarness(t, db, sis.Config{})
		if out := h.ok(resp); out != inbox.Done() || h.flight("16") == nil {
			t.Fatalf("RESP with the guard off: %+v", out)
		}
		if out := guarded.ok(fixture(t, "FLOP_CNCL_1.xml")); out != inbox.Skip("ignored:FLOP/CNCL") {
			t.Fatalf("ignored kind: %+v", out)
		}
		ldm := []byte(`<MSG><META><SNDR>AODB</SNDR><SEQN>1</SEQN><DTTM>20210123053500</DTTM><TYPE>LDM</TYPE><STYP>NEW</STYP></META><LDM>x</LDM></MSG>`)
		if out := h.ok(ldm); out != inbox.Skip("ignored:LDM/NEW") {
			t.Fatalf("LDM: %+v", out)
		}
		for _, kind := range []string{"XXXX/DNLD", "FLOP/ZZZZ", "SCHD/ZZZZ", "GLST/ZZZZ"} {
			typ, styp, _ := strings.Cut(kind, "/")
			msg := []byte(`<MSG><META><SNDR>AODB</SNDR><SEQN>2</SEQN><DTTM>20210123053500</DTTM><TYPE>` + typ + `</TYPE><STYP>` + styp + `</STYP></META><` + typ + `><FLID>15</FLID></` + typ + `></MSG>`)
			h.fails(msg, inbox.Unsupported)
		}
	})
}

func TestDecodeClassifies(t *testing.T) {
	p, err := sis.NewProcessor(sis.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := p.Decode(fixture(t, "FLOP_GTDT_1.xml"))
	if err != nil || d.Identity != "AODB|FLOP|GTDT|1243" || d.Kind != "FLOP/GTDT" {
		t.Fatalf("%+v %v", d, err)
	}
	for _, bad := range []string{"", "not xml", "<MSG><SCHD/></MSG>"} {
		if _, err := p.Decode([]byte(bad)); inbox.ClassOf(err) != inbox.Malformed {
			t.Errorf("%q: %v", bad, err)
		}
	}
	// The reason recorded is the error's text: the class said once.
	_, err = p.Decode([]byte("not xml"))
	if msg := err.Error(); !strings.HasPrefix(msg, "MALFORMED: ") || strings.Count(msg, "MALFORMED") != 1 {
		t.Errorf("the reason of a malformed message: %q", msg)
	}
}

func TestFlopSubtypesCoverTheInterface(t *testing.T) {
	want := strings.Fields(`ABTM ACFT APPT BOTM CHDT CHOT CKDT CLDT CNCL COBT CTOT DELY EGSR EGST EOBT ERUT EXSS FDEL FDIV
		FINT FLAB FLIN FLTY FRET FTSS GTDT HNAG IEST LACL MAXP NAAT NEAT PADT PEDT PORT PSDT PSHT REMC RENO RUNW SRVT STND
		TAOP TIPT TOBT TRML VIPF VIPP`)
	got := sis.FlopSubtypes()
	for _, s := range want {
		if !slices.Contains(got, s) {
			t.Errorf("FLOP/%s not handled", s)
		}
	}
}

// TestOneTransactionForSeveralMessages runs messages the way group commit
// does — one transaction, a savepoint each — with a failing one in the
// middle: every message sees the writes of those before it, and the failed
// one's rollback leaves no trace.
func TestOneTransactionForSeveralMessages(t *testing.T) {
	storetest.Each(t, []store.Line{sis.Schema()}, func(t *testing.T, db *store.DB) {
		h := loaded(t, db)
		dnld := fixture(t, "SCHD_DNLD_1.xml")
		batch := [][]byte{
			withSeq(fixture(t, "FLOP_APPT_1.xml"), 1),
			// Flight 16 on another day: DEAD(PROTOCOL) after its flights were read.
			withSeq(replace(t, replace(t, replace(t, dnld, "<SODT>23JAN210535</SODT>", "<SODT>24JAN210535</SODT>"),
				"<SODT>23JAN210325</SODT>", "<SODT>24JAN210325</SODT>"), "<FLNO>YG9028</FLNO>", "<FLNO>XX1</FLNO>"), 2),
			withSeq(fixture(t, "FLOP_ACFT_1.xml"), 3),
			withSeq(fixture(t, "FLOP_APPT_2.xml"), 4),
		}
		p := h.p
		var (
			outs []inbox.Outcome
			errs []error
		)
		decoded := make([]inbox.DecodedOf[*sisxml.Message], len(batch))
		for i, m := range batch {
			d, err := p.Decode(m)
			if err != nil {
				t.Fatal(err)
			}
			decoded[i] = d
		}
		err := db.InTx(context.Background(), func(ctx context.Context, tx store.Tx) error {
			for i, d := range decoded {
				msg := &inbox.Message{Stream: "sis", ID: int64(100 + i), Attempt: 1, Identity: d.Identity, Kind: d.Kind, Decoded: d.Value, Now: t0}
				var out inbox.Outcome
				err := tx.Savepoint(ctx, func(ctx context.Context) error {
					var err error
					out, err = p.Process(ctx, tx, msg, d.Value)
					return err
				})
				outs, errs = append(outs, out), append(errs, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if errs[0] != nil || inbox.ClassOf(errs[1]) != inbox.Protocol || errs[2] != nil || errs[3] != nil {
			t.Fatalf("errors %v", errs)
		}
		f := h.flight("15")
		if f.Version != 4 || f.Fields["ACFT"] != "358" || f.Fields["FLNO"] != "YG9028" || f.LastMsgID != 103 {
			t.Fatalf("flight 15: %+v", f)
		}
		if _, ok := f.Fields["APPT"]; ok {
			t.Fatalf("APPT set by message 100 and cleared by 103 is %q", f.Fields["APPT"])
		}
	})
}

// TestStateEncodingIsEncodingJSONs: the state document is written by hand
// for speed; it must be what encoding/json writes, or a stored state would
// not compare equal to the same state encoded again.
func TestStateEncodingIsEncodingJSONs(t *testing.T) {
	for _, s := range []string{"", "plain", `q"uote`, `back\slash`, "<>&", "中文", "\u2028", "tab\there", "bad\xffutf8"} {
		f := &sis.Flight{Fields: map[string]string{"K": s, s: "v"}, Collections: map[string][]sis.Item{"C": {{"#text": s}}}}
		got, err := sis.StateJSON(f)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(struct {
			Fields      map[string]string     `json:"fields"`
			Collections map[string][]sis.Item `json:"collections"`
		}{f.Fields, f.Collections})
		if string(got) != string(want) {
			t.Errorf("%q:\n got %s\nwant %s", s, got, want)
		}
	}
}

// TestAnyBodyUnderAnyKind processes every fixture's body under the kinds
// msgx handles (a FLOP body as a schedule, a reference body as a FLOP, ...):
// whatever arrives ends as a success, a skip or a classified failure, never
// a panic or an unclassified error.
func TestAnyBodyUnderAnyKind(t *testing.T) {
	h := loaded(t, storetest.NewSQLite(t, store.WithMigrate(sis.Schema())))
	kinds := [][2]string{{"SCHD", "DNLD"}, {"SCHD", "ADFT"}, {"FLOP", "GTDT"}, {"FLOP", "HNAG"}, {"FLOP", "FDEL"}, {"FDEL", "FDEL"}}
	typeRE := regexp.MustCompile(`<TYPE>[^<]*</TYPE>`)
	stypRE := regexp.MustCompile(`<STYP>[^<]*</STYP>`)
	seq := int64(500000)
	for _, name := range traffic.Names() {
		for _, k := range kinds {
			seq++
			m := typeRE.ReplaceAll(fixture(t, name), []byte("<TYPE>"+k[0]+"</TYPE>"))
			m = withSeq(stypRE.ReplaceAll(m, []byte("<STYP>"+k[1]+"</STYP>")), seq)
			_, err := h.process(m)
			if err != nil {
				if c := inbox.ClassOf(err); c != inbox.Protocol && c != inbox.Unsupported {
					t.Fatalf("%s as %s/%s: %v", name, k[0], k[1], err)
				}
			}
		}
	}
}

// TestGBKBytes: a payload in GBK bytes, declared so (as a transport that does
// not transcode hands it over), is read as its declaration says.
func TestGBKBytes(t *testing.T) {
	storetest.Each(t, []store.Line{sis.Schema()}, func(t *testing.T, db *store.DB) {
		h := loaded(t, db)
		utf := replace(t, fixture(t, "FLOP_SRVT_1.xml"), `encoding="UTF-8"`, `encoding="GBK"`)
		gbk, err := simplifiedchinese.GBK.NewEncoder().Bytes(utf)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(gbk), "由于") {
			t.Fatal("the GBK payload still holds UTF-8 text")
		}
		h.ok(gbk)
		if s := h.flight("15").Collections["SRVT"]; len(s) != 1 || s[0]["SARR"] != "由于机器问题延误服务事务" {
			t.Fatalf("services %v", s)
		}
	})
}

// TestIdentityDayBoundary: with identity.include-day-boundary the DTTM date
// joins the identity, so the same SEQN on another day is another message;
// without it, it is the same identity.
func TestIdentityDayBoundary(t *testing.T) {
	msg := fixture(t, "FLOP_GTDT_1.xml")
	dttm := regexp.MustCompile(`<DTTM>(\d{8})`).FindSubmatch(msg)
	if dttm == nil {
		t.Fatal("no DTTM")
	}
	nextDay := replace(t, msg, "<DTTM>"+string(dttm[1]), "<DTTM>"+"20991231")
	for _, on := range []bool{false, true} {
		p, err := sis.NewProcessor(sis.Config{IncludeDayBoundary: on})
		if err != nil {
			t.Fatal(err)
		}
		a, err := p.Decode(msg)
		if err != nil {
			t.Fatal(err)
		}
		b, err := p.Decode(nextDay)
		if err != nil {
			t.Fatal(err)
		}
		if (a.Identity != b.Identity) != on {
			t.Errorf("include-day-boundary %v: identities %q and %q", on, a.Identity, b.Identity)
		}
		if on && !strings.HasSuffix(a.Identity, "|"+string(dttm[1])) {
			t.Errorf("identity %q lacks the date %s", a.Identity, dttm[1])
		}
	}
}

// TestTablesFollowEveryFlop: after each FLOP, set and then cleared again
// (an empty element clears a field and its attributes), the flight's row and
// detail tables hold exactly the state its schd event carries: a column or
// detail row a message should have set or cleared and did not shows here at
// that message, not only in the end state TestEveryFixtureIsHandled checks.
func TestTablesFollowEveryFlop(t *testing.T) {
	storetest.Each(t, []store.Line{sis.Schema()}, func(t *testing.T, db *store.DB) {
		h := loaded(t, db)
		check := func(name string) {
			t.Helper()
			var last *event
			for _, e := range h.events() {
				if e.Target == sis.TargetSchd && e.Key == "121112312" {
					last = &e
				}
			}
			s, f := schdState(t, *last), h.flight("121112312")
			if f.Version != s.StateVersion || !reflect.DeepEqual(f.Fields, s.Fields) || !reflect.DeepEqual(norm(f.Collections), norm(s.Collections)) {
				t.Fatalf("after %s: tables and state differ:\ntables %+v\nstate  %+v", name, f, s)
			}
		}
		flop := regexp.MustCompile(`(?s)<FLOP>.*</FLOP>`)
		for _, name := range traffic.Names() {
			if !strings.HasPrefix(name, "FLOP_") || strings.HasPrefix(name, "FLOP_FDEL") {
				continue
			}
			msg := regexp.MustCompile(`<FLID>[^<]*</FLID>`).ReplaceAll(fixture(t, name), []byte("<FLID>121112312</FLID>"))
			h.ok(msg)
			check(name)
			styp := strings.Split(name, "_")[1]
			cleared := flop.ReplaceAll(msg, []byte("<FLOP><FLID>121112312</FLID><"+styp+"></"+styp+"></FLOP>"))
			h.ok(withSeq(cleared, 800000+h.next))
			check(name + " cleared")
		}
	})
}
