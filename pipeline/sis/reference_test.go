package sis_test

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/pipeline/sis"
	"github.com/msgx/msgx/pipeline/sis/traffic"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// refRow is a sis_ref_master row.
type refRow struct {
	Key     string
	Version int64
	Record  map[string]any
}

// refs reads the stored records of a reference type, by key.
func (h *harness) refs(rtype string) map[string]refRow {
	h.t.Helper()
	rows, err := h.db.Query(context.Background(), "SELECT rkey, version, record FROM sis_ref_master WHERE rtype = '"+rtype+"'")
	if err != nil {
		h.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]refRow{}
	for rows.Next() {
		var r refRow
		var rec string
		if err := rows.Scan(&r.Key, &r.Version, &rec); err != nil {
			h.t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(rec), &r.Record); err != nil {
			h.t.Fatal(err)
		}
		out[r.Key] = r
	}
	if err := rows.Err(); err != nil {
		h.t.Fatal(err)
	}
	return out
}

// refEvents decodes the ref events among evs.
func refEvents(t *testing.T, evs []event) []sis.RefEvent {
	t.Helper()
	var out []sis.RefEvent
	for _, e := range evs {
		if e.Target != sis.TargetRef {
			continue
		}
		var r sis.RefEvent
		if err := json.Unmarshal(e.Payload, &r); err != nil {
			t.Fatalf("ref payload %s: %v", e.Payload, err)
		}
		if e.Key != r.RTYPE+":"+r.RKEY || e.Topic != sis.DefaultRefTopic {
			t.Errorf("event %s: key %q topic %q", e.ID, e.Key, e.Topic)
		}
		out = append(out, r)
	}
	return out
}

func opsOf(evs []sis.RefEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Op + ":" + e.RKEY + ":" + strconv.FormatInt(e.Version, 10)
	}
	return out
}

// TestReferenceLifecycle runs the real ABDG messages: DNLD stores the set,
// ADD and UPD upsert (an unchanged record is no change), DEL deletes, a
// later snapshot replaces the whole set; every change is one event.
func TestReferenceLifecycle(t *testing.T) {
	storetest.Each(t, []store.Line{sis.Schema()}, func(t *testing.T, db *store.DB) {
		h := newHarness(t, db, sis.Config{})
		step := func(name, wantKeys string, wantOps ...string) {
			t.Helper()
			before := len(h.events())
			if out := h.ok(fixture(t, name)); out != inbox.Done() {
				t.Fatalf("%s: %+v", name, out)
			}
			got := opsOf(refEvents(t, h.events()[before:]))
			if strings.Join(got, " ") != strings.Join(wantOps, " ") {
				t.Errorf("%s: events %v, want %v", name, got, wantOps)
			}
			keys := slices.Sorted(maps.Keys(h.refs("ABDG")))
			if strings.Join(keys, ",") != wantKeys {
				t.Errorf("%s: stored keys %v, want %s", name, keys, wantKeys)
			}
		}
		step("ABDG_DNLD_1.xml", "112,212", "upsert:212:1", "upsert:112:1")
		step("ABDG_ADD_1.xml", "112,212,213", "upsert:213:1")
		step("ABDG_UPD_1.xml", "112,212,213", "upsert:213:2")
		step("ABDG_UPD_1.xml", "112,212,213") // the same record again: no change
		step("ABDG_UPD_3.xml", "112,212,213,214", "upsert:214:1")
		step("ABDG_DEL_1.xml", "112,212,214", "delete:213:3")
		step("ABDG_DEL_2.xml", "112,212,214") // already gone
		step("ABDG_RESP_1.xml", "112,212", "delete:214:2")

		rec := h.refs("ABDG")["112"]
		if rec.Version != 1 || rec.Record["ATML"] != "T1" || len(rec.Record["STND"].([]any)) != 2 {
			t.Errorf("record 112: %+v", rec)
		}
		evs := refEvents(t, h.events())
		first := evs[0]
		if first.Schema != sis.SchemaRef || first.Kind != "ABDG/DNLD" || first.Meta.SEQN != 1243 || first.Record == nil {
			t.Errorf("first event %+v", first)
		}
		if last := evs[len(evs)-1]; last.Op != sis.RefDelete || !strings.Contains(string(last.Record), `"ABCD":"214"`) {
			t.Errorf("delete event carries %s", last.Record)
		}
	})
}

// TestReferenceEveryType applies every reference fixture (DNLD first): each
// type's records are keyed by their first child element.
func TestReferenceEveryType(t *testing.T) {
	storetest.Each(t, []store.Line{sis.Schema()}, func(t *testing.T, db *store.DB) {
		h := newHarness(t, db, sis.Config{Ignore: []string{}})
		for _, name := range traffic.Names() {
			typ, rest, _ := strings.Cut(name, "_")
			if typ == "FLOP" || typ == "SCHD" || typ == "SCHS" || !strings.HasPrefix(rest, "DNLD") {
				continue
			}
			if out := h.ok(fixture(t, name)); out != inbox.Done() {
				t.Fatalf("%s: %+v", name, out)
			}
		}
		want := map[string]string{"ABDG": "112,212", "AIRL": "AA,CX,UA", "ARPT": "MEL,PEK,SHA", "REGN": "A40LF,A6AIN"}
		for typ, keys := range want {
			if got := strings.Join(slices.Sorted(maps.Keys(h.refs(typ))), ","); got != keys {
				t.Errorf("%s keys %s, want %s", typ, got, keys)
			}
		}
		for _, typ := range sis.ReferenceTypes {
			if len(h.refs(typ)) == 0 {
				t.Errorf("%s: nothing stored", typ)
			}
		}
	})
}

// TestReferenceREGNIgnoredByDefault: REGN is a reference type, but the
// default ignore list names it and wins; with an empty list it is stored.
func TestReferenceREGNIgnoredByDefault(t *testing.T) {
	storetest.Each(t, []store.Line{sis.Schema()}, func(t *testing.T, db *store.DB) {
		h := newHarness(t, db, sis.Config{})
		if out := h.ok(fixture(t, "REGN_DNLD_1.xml")); out != inbox.Skip("ignored:REGN/DNLD") {
			t.Fatalf("default: %+v", out)
		}
		if n := len(h.refs("REGN")); n != 0 || len(h.events()) != 0 {
			t.Fatalf("ignored REGN stored %d records, %d events", n, len(h.events()))
		}
		h2 := newHarness(t, db, sis.Config{Ignore: []string{}})
		if out := h2.ok(fixture(t, "REGN_DNLD_1.xml")); out != inbox.Done() {
			t.Fatalf("not ignored: %+v", out)
		}
		if n := len(h2.refs("REGN")); n != 2 {
			t.Fatalf("REGN records %d, want 2", n)
		}
	})
}

// TestReferenceBadPackets: a record without a key or a key carried twice
// makes the packet DEAD(PROTOCOL) and writes nothing.
func TestReferenceBadPackets(t *testing.T) {
	storetest.Each(t, []store.Line{sis.Schema()}, func(t *testing.T, db *store.DB) {
		h := newHarness(t, db, sis.Config{})
		dnld := fixture(t, "ABDG_DNLD_1.xml")
		h.fails(replace(t, dnld, "<ABCD>112</ABCD>", "<ABCD> </ABCD>"), inbox.Protocol)
		h.fails(replace(t, dnld, "<ABCD>112</ABCD>", "<ABCD>212</ABCD>"), inbox.Protocol)
		if n := len(h.refs("ABDG")); n != 0 {
			t.Fatalf("%d records written", n)
		}
	})
}

// TestSeasonSchedule: SCHS is stored whole per season and airport, changes
// no flight and publishes nothing; the same schedule again is no change.
func TestSeasonSchedule(t *testing.T) {
	storetest.Each(t, []store.Line{sis.Schema()}, func(t *testing.T, db *store.DB) {
		h := newHarness(t, db, sis.Config{})
		season := func() (version int64, recs int, body string) {
			t.Helper()
			err := db.QueryRow(context.Background(), "SELECT version, recs, body FROM sis_season_schedule WHERE snam = 'Winter' AND apcd = 'CTU'").Scan(&version, &recs, &body)
			if err != nil {
				t.Fatal(err)
			}
			return
		}
		for i, name := range []string{"SCHS_DNLD_1.xml", "SCHS_DNLD_1.xml", "SCHS_RESP_1.xml"} {
			if out := h.ok(fixture(t, name)); out != inbox.Done() {
				t.Fatalf("%s: %+v", name, out)
			}
			v, recs, body := season()
			if recs != 2 || !strings.Contains(body, `"FLNO":"LH724"`) {
				t.Errorf("%s: recs %d body %.200s", name, recs, body)
			}
			if i < 2 && v != 1 {
				t.Errorf("%s: version %d, want 1", name, v)
			}
		}
		if n := len(h.events()); n != 0 {
			t.Errorf("%d events", n)
		}
		var flights int
		if err := db.QueryRow(context.Background(), "SELECT count(*) FROM flight_schd").Scan(&flights); err != nil || flights != 0 {
			t.Errorf("flights %d (%v)", flights, err)
		}
		h.fails(replace(t, fixture(t, "SCHS_DNLD_1.xml"), "<RECS>2</RECS>", "<RECS>3</RECS>"), inbox.Protocol)
	})
}

// TestReferenceKeepsUnknownElements: every reference fixture with an element
// the interface does not define added beside its records is applied as
// before, and the element is kept — stored for the message and carried by
// each of its events — rather than dropped.
func TestReferenceKeepsUnknownElements(t *testing.T) {
	storetest.Each(t, []store.Line{sis.Schema()}, func(t *testing.T, db *store.DB) {
		h := newHarness(t, db, sis.Config{Ignore: []string{}})
		ref := map[string]bool{}
		for _, typ := range sis.ReferenceTypes {
			ref[typ] = true
		}
		names := traffic.Names()
		// The snapshots first, as a real feed starts, then the changes.
		slices.SortStableFunc(names, func(a, b string) int {
			return strings.Compare(strconv.FormatBool(!strings.Contains(a, "_DNLD")), strconv.FormatBool(!strings.Contains(b, "_DNLD")))
		})
		tried := 0
		for _, name := range names {
			typ, _, _ := strings.Cut(name, "_")
			if !ref[typ] {
				continue
			}
			msg := fixture(t, name)
			i := strings.Index(string(msg), "</MSG>") // some real packets close it twice
			if i < 0 {
				t.Fatalf("%s: no </MSG>", name)
			}
			msg = []byte(string(msg[:i]) + `<XTRA CODE="7">kept</XTRA>` + string(msg[i:]))
			before := len(h.events())
			out, err := h.process(msg)
			if err != nil || out.Status != inbox.Succeeded {
				// A packet the processor refuses must still refuse the same
				// way with the element added; none of the fixtures is one.
				t.Fatalf("%s with an unknown element: %+v %v", name, out, err)
			}
			tried++
			var extra string
			if err := db.QueryRow(context.Background(), "SELECT extra FROM sis_ref_extra WHERE msg_id = "+strconv.FormatInt(h.next, 10)).Scan(&extra); err != nil {
				t.Fatalf("%s: the unknown element was not stored: %v", name, err)
			}
			if !strings.Contains(extra, `"XTRA"`) || !strings.Contains(extra, "kept") || !strings.Contains(extra, `"@CODE":"7"`) {
				t.Errorf("%s: stored %s", name, extra)
			}
			for _, ev := range refEvents(t, h.events()[before:]) {
				if !strings.Contains(string(ev.Extra), `"XTRA"`) {
					t.Errorf("%s: event %s:%s carries no unknown element: %s", name, ev.RTYPE, ev.RKEY, ev.Extra)
				}
			}
		}
		if tried < len(sis.ReferenceTypes) {
			t.Fatalf("only %d reference fixtures", tried)
		}
	})
}
