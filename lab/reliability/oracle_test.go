package reliability

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestReplay: the oracle processes the first copy of an identity, counts
// the others as duplicates, and expects an event only from a message that
// changes its flight.
func TestReplay(t *testing.T) {
	g := newGen(2, 100)
	stnd := func(flid, v string) string {
		return meta(g.seq.Add(1), "FLOP", "STND") + "<FLOP><FLID>" + flid + "</FLID><STND>" + v + "</STND></FLOP></MSG>"
	}
	a := stnd("900000", "S1")
	rows := []mailboxRow{
		{id: 1, body: string(g.dnld())},
		{id: 2, body: a},
		{id: 3, body: a},                    // the same message inserted again
		{id: 4, body: stnd("900000", "S1")}, // no change
		{id: 5, body: stnd("900000", "S2")},
		{id: 6, body: meta(g.seq.Add(1), "FLOP", "GTDT") + `<FLOP><FLID>900001</FLID><GTDT GTNO="1"><GATE>G1</GATE></GTDT></FLOP></MSG>`},
		{id: 7, body: "<MSG><not closed"},
	}
	o := replay(rows)
	if o.dups != 1 || o.accepted[3] != "SKIPPED" || o.accepted[4] != "SUCCEEDED" {
		t.Fatalf("dups %d, accepted %v", o.dups, o.accepted)
	}
	var ids []string
	for id := range o.events {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	want := []string{"sis:1:msg:900000", "sis:1:msg:900001", "sis:2:msg:900000", "sis:5:msg:900000", "sis:6:msg:900001"}
	if !slices.Equal(ids, want) {
		t.Fatalf("events %v, want %v", ids, want)
	}
	if f := o.flights["900000"]; f.version != 3 || f.stnd != "S2" {
		t.Errorf("flight 900000: %+v", f)
	}
	if f := o.flights["900001"]; f.version != 2 || !slices.Equal(f.gates, []string{"G1"}) {
		t.Errorf("flight 900001: %+v", f)
	}
}

// TestGeneratedParse: every generated message reads back as generated.
func TestGeneratedParse(t *testing.T) {
	g := newGen(3, 0)
	r := rand.New(rand.NewPCG(1, 2))
	if p, ok := parse(string(g.dnld())); !ok || len(p.flids) != 3 || p.styp != "DNLD" {
		t.Fatalf("dnld: %+v %v", p, ok)
	}
	for range 100 {
		if p, ok := parse(string(g.flop(r))); !ok || len(p.flids) != 1 {
			t.Fatalf("flop: %+v %v", p, ok)
		}
	}
	// The hostile bodies name no announced flight: they change nothing in
	// the oracle.
	rows := []mailboxRow{{id: 1, body: string(g.dnld())}}
	for _, body := range hostile(g) {
		rows = append(rows, mailboxRow{id: int64(len(rows) + 1), body: string(body)})
	}
	if o := replay(rows); len(o.flights) != 3 || len(o.events) != 3 {
		t.Errorf("hostile bodies changed the oracle: %d flights, %d events", len(o.flights), len(o.events))
	}
}

// TestReplayADFT: an ADFT of new flights (the aimed kills' snapshots) creates
// them as the DNLD does, one event each; the same ADFT again is a duplicate.
func TestReplayADFT(t *testing.T) {
	g := newGen(1, 100)
	ad := string(g.adft(1))
	if p, ok := parse(ad); !ok || p.styp != "ADFT" || !slices.Equal(p.flids, []string{"950002", "950003"}) {
		t.Fatalf("adft: %+v %v", p, ok)
	}
	o := replay([]mailboxRow{{id: 1, body: string(g.dnld())}, {id: 2, body: ad}, {id: 3, body: ad}})
	if o.accepted[2] != "SUCCEEDED" || o.accepted[3] != "SKIPPED" || o.flights["950002"] == nil || o.flights["950003"].version != 1 {
		t.Fatalf("accepted %v flights %v", o.accepted, o.flights)
	}
	if _, ok := o.events["sis:2:msg:950003"]; !ok || len(o.events) != 3 {
		t.Fatalf("events %v, want the DNLD's and one per new flight", o.events)
	}
}

// TestLateRowIsLeftOutOfTheOracle: a row refused as LATE was not applied, so
// the oracle does not apply it either; the newer change stands.
func TestLateRowIsLeftOutOfTheOracle(t *testing.T) {
	g := newGen(1, 300)
	stnd := func(v string) string {
		return meta(g.seq.Add(1), "FLOP", "STND") + "<FLOP><FLID>" + g.flights[0] + "</FLID><STND>" + v + "</STND></FLOP></MSG>"
	}
	rows := []mailboxRow{{id: 1, body: string(g.dnld())}, {id: 2, body: stnd("OLD")}, {id: 3, body: stnd("NEW")}}
	o := replay(applied(rows, map[int64]bool{2: true}))
	if f := o.flights[g.flights[0]]; f.stnd != "NEW" || f.version != 2 {
		t.Errorf("flight: %+v, want the newer change only", f)
	}
	if _, ok := o.accepted[2]; ok {
		t.Errorf("the late row was accepted: %v", o.accepted)
	}
}
