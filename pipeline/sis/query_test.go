package sis_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/pipeline/sis"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// counting counts the statements run through it.
type counting struct {
	store.Querier
	n int
}

func (c *counting) Query(ctx context.Context, q string, args ...any) (store.Rows, error) {
	c.n++
	return c.Querier.Query(ctx, q, args...)
}

func (c *counting) QueryRow(ctx context.Context, q string, args ...any) store.Row {
	c.n++
	return c.Querier.QueryRow(ctx, q, args...)
}

// adftOn composes a SCHD ADFT adding flights F<from>..F<to-1> on day
// (ddMONyy), each with a gate.
func adftOn(seq int64, day string, from, to int) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `<MSG><META><SNDR>AODB</SNDR><SEQN>%d</SEQN><DTTM>20031215080000</DTTM><TYPE>SCHD</TYPE><STYP>ADFT</STYP></META><SCHD><RECS>%d</RECS>`, seq, to-from)
	for i := from; i < to; i++ {
		fmt.Fprintf(&b, `<FLTR><FLID>F%05d</FLID><ALCD>CA</ALCD><FLNO>CA%d</FLNO><MVIN>A</MVIN><SODT>%s1345</SODT><GTDT GTNO="1"><GATE>G%d</GATE></GTDT></FLTR>`, i, i, day, i%40)
	}
	b.WriteString(`</SCHD></MSG>`)
	return []byte(b.String())
}

// TestFlightQueryPaging pages through 3000 flights on two days with every
// filter: each page costs the same number of queries whatever its size,
// pages neither overlap nor miss a flight, and each flight is its full
// stored state.
func TestFlightQueryPaging(t *testing.T) {
	storetest.Each(t, []store.Line{sis.Schema()}, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		h := newHarness(t, db, sis.Config{})
		for i := 0; i < 6; i++ {
			day := "15DEC03"
			if i >= 4 {
				day = "16DEC03"
			}
			if out := h.ok(adftOn(int64(100+i), day, i*500, (i+1)*500)); out != inbox.Done() {
				t.Fatalf("ADFT %d: %+v", i, out)
			}
		}
		fdel := `<MSG><META><SNDR>AODB</SNDR><SEQN>%d</SEQN><DTTM>20031215090000</DTTM><TYPE>FLOP</TYPE><STYP>FDEL</STYP></META><FLOP><FLID>%s</FLID></FLOP></MSG>`
		for i, id := range []string{"F00007", "F02500", "F02999"} {
			if out := h.ok([]byte(fmt.Sprintf(fdel, 200+i, id))); out != inbox.Done() {
				t.Fatalf("FDEL %s: %+v", id, out)
			}
		}

		walk := func(f sis.FlightFilter) (ids []string, queriesPerPage map[int]bool) {
			t.Helper()
			queriesPerPage = map[int]bool{}
			for pages := 0; ; pages++ {
				if pages > 100 {
					t.Fatal("paging does not end")
				}
				c := &counting{Querier: db}
				page, err := sis.QueryFlights(ctx, c, f)
				if err != nil {
					t.Fatal(err)
				}
				queriesPerPage[c.n] = true
				for _, fl := range page.Flights {
					ids = append(ids, fl.FLID)
				}
				if page.Next == "" {
					return ids, queriesPerPage
				}
				f.After = page.Next
			}
		}
		all, qpp := walk(sis.FlightFilter{Limit: 700})
		if len(all) != 3000 || all[0] != "F00000" || all[2999] != "F02999" {
			t.Fatalf("all flights: %d (%v…)", len(all), all[:3])
		}
		for i := 1; i < len(all); i++ {
			if all[i] <= all[i-1] {
				t.Fatalf("pages overlap or are out of order at %d: %s after %s", i, all[i], all[i-1])
			}
		}
		if len(qpp) != 1 {
			t.Errorf("queries per page vary: %v", qpp)
		}
		day2, _ := walk(sis.FlightFilter{Day: "2003-12-16", Limit: 333})
		if len(day2) != 1000 || day2[0] != "F02000" {
			t.Errorf("16 Dec: %d flights", len(day2))
		}
		deleted, _ := walk(sis.FlightFilter{Status: sis.StatusDeleted})
		if strings.Join(deleted, ",") != "F00007,F02500,F02999" {
			t.Errorf("deleted %v", deleted)
		}
		active16, _ := walk(sis.FlightFilter{Day: "2003-12-16", Status: sis.StatusActive, Limit: 1000})
		if len(active16) != 998 {
			t.Errorf("active on 16 Dec: %d", len(active16))
		}

		// The admin query: a FLID list, the full state of each flight.
		res, err := sis.FlightsQuery(db)(ctx, map[string][]string{"flid": {"F00001,F01234", "F09999"}})
		if err != nil {
			t.Fatal(err)
		}
		page := res.(sis.FlightPage)
		if len(page.Flights) != 2 || page.Next != "" {
			t.Fatalf("FLID list: %+v", page)
		}
		fl := page.Flights[1]
		if fl.FLID != "F01234" || fl.Fields["FLNO"] != "CA1234" || fl.OperationDay != "2003-12-15" || fl.StateVersion != 1 ||
			len(fl.Collections["GTDT"]) != 1 || fl.Collections["GTDT"][0]["GATE"] != "G34" {
			t.Fatalf("flight %+v", fl)
		}
		// By flight number.
		res, err = sis.FlightsQuery(db)(ctx, map[string][]string{"flno": {"CA2500"}})
		if page := res.(sis.FlightPage); err != nil || len(page.Flights) != 1 || page.Flights[0].FLID != "F02500" || page.Flights[0].Status != sis.StatusDeleted {
			t.Fatalf("by FLNO (%v): %+v", err, page)
		}
		for _, bad := range []map[string][]string{{"day": {"16DEC03"}}, {"status": {"GONE"}}, {"limit": {"5000"}}, {"limit": {"x"}}} {
			if _, err := sis.FlightsQuery(db)(ctx, bad); err == nil {
				t.Errorf("%v accepted", bad)
			}
		}
	})
}
