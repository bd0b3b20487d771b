package sis_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/pipeline/sis"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// TestFlightVersions: every message that changes a flight records, in its
// transaction, the version with its message (stream, id, SEQN, TYPE/STYP,
// SNDR), what changed (status, fields and collections before → after) and
// its events; a message that changes nothing records nothing; the history
// is read newest first and by message.
func TestFlightVersions(t *testing.T) {
	storetest.Each(t, []store.Line{sis.Schema()}, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		h := newHarness(t, db, sis.Config{})
		h.ok(fixture(t, "SCHD_DNLD_1.xml")) // id 1: flights 15 and 16
		gtdt := replace(t, fixture(t, "FLOP_GTDT_1.xml"), "<FLID>121112312</FLID>", "<FLID>15</FLID>")
		h.ok(gtdt)                                                 // id 2
		h.ok(fixture(t, "FLOP_CNCL_1.xml"))                        // id 3
		if out := h.ok(withSeq(gtdt, 4242)); out != inbox.Done() { // id 4: the same gates, no change
			t.Fatalf("repeated GTDT: %+v", out)
		}
		h.ok(fixture(t, "FLOP_FDEL_1.xml")) // id 5

		vs, err := sis.FlightHistory(ctx, db, "15", 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, v := range vs {
			got = append(got, v.TYPE+"/"+v.STYP+"#"+itoa(v.MsgID)+"@"+itoa(v.Version))
		}
		if strings.Join(got, " ") != "FLOP/FDEL#5@4 FLOP/CNCL#3@3 FLOP/GTDT#2@2 SCHD/DNLD#1@1" {
			t.Fatalf("versions of 15: %v", got)
		}
		del, cncl, gates, created := vs[0], vs[1], vs[2], vs[3]
		if del.Status != sis.StatusDeleted || del.Stream != "sis" || del.SEQN != 1243 || del.SNDR == "" ||
			del.Changes.Status == nil || *del.Changes.Status != (sis.FieldChange{Before: "ACTIVE", After: "DELETED"}) ||
			len(del.Changes.Fields) != 0 || len(del.Changes.Collections) != 0 {
			t.Fatalf("FDEL version: %+v", del)
		}
		if len(del.Events) != 2 || del.Events[0].Target != sis.TargetMsg || del.Events[1].Type != "tombstone" ||
			del.Events[1].ID != "sis:5:schd:15" {
			t.Fatalf("FDEL events: %+v", del.Events)
		}
		if len(cncl.Changes.Fields) != 1 || cncl.Changes.Fields[0] != (sis.FieldChange{Name: "CNCL", After: "15DEC031722"}) ||
			cncl.Changes.Status != nil || len(cncl.Changes.Collections) != 0 {
			t.Fatalf("CNCL version: %+v", cncl.Changes)
		}
		if len(gates.Changes.Collections) != 1 || gates.Changes.Collections[0].Name != "GTDT" ||
			string(gates.Changes.Collections[0].Before) != "null" {
			t.Fatalf("GTDT version: %+v", gates.Changes)
		}
		var after []sis.Item
		if err := json.Unmarshal(gates.Changes.Collections[0].After, &after); err != nil || len(after) != 3 {
			t.Fatalf("GTDT after (%v): %s", err, gates.Changes.Collections[0].After)
		}
		flno := false
		for _, f := range created.Changes.Fields {
			flno = flno || f == (sis.FieldChange{Name: "FLNO", After: "YG9028"})
		}
		rout := false
		for _, c := range created.Changes.Collections {
			rout = rout || c.Name == "ROUT" && string(c.Before) == "null" && len(c.After) > 2
		}
		if !flno || !rout || created.Changes.Status == nil || created.Changes.Status.After != sis.StatusActive || created.At.IsZero() {
			t.Fatalf("first version: %+v", created)
		}

		// Paged, newest first.
		page, err := sis.FlightHistoryQuery(db)(ctx, map[string][]string{"flid": {"15"}, "limit": {"3"}})
		if err != nil {
			t.Fatal(err)
		}
		if p := page.(sis.FlightHistoryPage); len(p.Versions) != 3 || p.Next != 2 {
			t.Fatalf("first page: %d versions, next %d", len(p.Versions), p.Next)
		}
		page, err = sis.FlightHistoryQuery(db)(ctx, map[string][]string{"flid": {"15"}, "before": {"2"}})
		if p := page.(sis.FlightHistoryPage); err != nil || len(p.Versions) != 1 || p.Versions[0].Version != 1 || p.Next != 0 {
			t.Fatalf("last page (%v): %+v", err, p)
		}
		if _, err := sis.FlightHistoryQuery(db)(ctx, map[string][]string{}); err == nil {
			t.Fatal("a history without flid answered")
		}

		// From a message to its effects.
		eff, err := sis.MessageEffectsQuery(db)(ctx, map[string][]string{"stream": {"sis"}, "id": {"1"}})
		if err != nil {
			t.Fatal(err)
		}
		e := eff.(sis.MessageEffects)
		if len(e.Versions) != 2 || e.Versions[0].FLID != "15" || e.Versions[1].FLID != "16" || len(e.Versions[1].Events) != 2 {
			t.Fatalf("effects of message 1: %+v", e)
		}
		if eff, err := sis.MessageEffectsQuery(db)(ctx, map[string][]string{"stream": {"sis"}, "id": {"4"}}); err != nil ||
			len(eff.(sis.MessageEffects).Versions) != 0 {
			t.Fatalf("a message that changed nothing has effects (%v): %+v", err, eff)
		}
	})
}
