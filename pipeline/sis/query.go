package sis

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/msgx/msgx/admin"
	"github.com/msgx/msgx/store"
)

// FlightFilter selects the flights of a query page.
type FlightFilter struct {
	// Day is an operation day, yyyy-mm-dd ("" for all).
	Day string
	// Status is ACTIVE or DELETED ("" for both).
	Status string
	// FLNO is a flight number as the FLNO field holds it ("" for all).
	FLNO string
	// FLIDs restricts the page to these flights (nil for all).
	FLIDs []string
	// After is the cursor: the page starts after this FLID (FLID order).
	After string
	// Limit is the page size (default 100, at most 1000).
	Limit int
}

// FlightPage is a page of the flight query.
type FlightPage struct {
	Flights []SchdEvent `json:"flights"`
	// Next is the After of the next page; "" on the last page.
	Next string `json:"next"`
}

// MaxFlightPage bounds a page of the flight query.
const MaxFlightPage = 1000

// QueryFlights answers the flight query from the authoritative state (the
// flight table and its detail tables, as Read): one query for the page's
// FLIDs and Read's fixed number, whatever the page size.
func QueryFlights(ctx context.Context, db store.Querier, f FlightFilter) (FlightPage, error) {
	if f.Limit == 0 {
		f.Limit = 100
	}
	if err := f.check(); err != nil {
		return FlightPage{}, fmt.Errorf("sis: flight query: %w", err)
	}
	q, err := queries.For(db.Dialect())
	if err != nil {
		return FlightPage{}, err
	}
	flids := f.FLIDs
	if flids == nil {
		flids = []string{}
	}
	rows, err := db.Query(ctx, q.Get("FlightPage"), f.Day, f.Status, listArg(db.Dialect(), flids), f.After, f.Limit+1, f.FLNO)
	if err != nil {
		return FlightPage{}, fmt.Errorf("sis: flight query: %w", err)
	}
	var page []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return FlightPage{}, fmt.Errorf("sis: flight query: %w", err)
		}
		page = append(page, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return FlightPage{}, fmt.Errorf("sis: flight query: %w", err)
	}
	out := FlightPage{Flights: []SchdEvent{}}
	if len(page) > f.Limit {
		page = page[:f.Limit]
		out.Next = page[len(page)-1]
	}
	if len(page) == 0 {
		return out, nil
	}
	got, err := Read(ctx, db, page)
	if err != nil {
		return FlightPage{}, err
	}
	for _, id := range page {
		fl := got[id]
		if fl == nil {
			continue // deleted between the two queries
		}
		out.Flights = append(out.Flights, SchdEvent{
			SchdHead: SchdHead{Schema: SchemaSchd, FLID: fl.FLID, OperationDay: fl.OperationDay, Status: fl.Status,
				StateVersion: fl.Version, LastMsgID: fl.LastMsgID},
			Fields: fl.Fields, Collections: fl.Collections,
		})
	}
	return out, nil
}

// check refuses a filter no page can answer.
func (f FlightFilter) check() error {
	if f.Limit < 0 || f.Limit > MaxFlightPage {
		return fmt.Errorf("limit %d: want 1 to %d", f.Limit, MaxFlightPage)
	}
	if f.Day != "" {
		if _, err := time.Parse(time.DateOnly, f.Day); err != nil {
			return fmt.Errorf("day %q: want yyyy-mm-dd", f.Day)
		}
	}
	if f.Status != "" && f.Status != StatusActive && f.Status != StatusDeleted {
		return fmt.Errorf("status %q: want %s or %s", f.Status, StatusActive, StatusDeleted)
	}
	if len(f.FLIDs) > MaxFlightPage {
		return fmt.Errorf("flid: %d FLIDs; at most %d", len(f.FLIDs), MaxFlightPage)
	}
	return nil
}

// queryParams reads the parameters of an admin query: single are the names
// given at most once, multi those that may repeat; any other name, and a
// single one given twice, is refused (admin.ErrBadParameter), so that a
// misspelt filter does not silently answer everything.
func queryParams(params map[string][]string, single, multi []string) (map[string]string, error) {
	one := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(params)) {
		values := params[name]
		switch {
		case slices.Contains(single, name):
			if len(values) > 1 {
				return nil, fmt.Errorf("%w: %s is given %d times; give it once", admin.ErrBadParameter, name, len(values))
			}
			if len(values) == 1 {
				one[name] = values[0]
			}
		case slices.Contains(multi, name):
		default:
			known := slices.Sorted(slices.Values(append(slices.Clone(single), multi...)))
			return nil, fmt.Errorf("%w: %q is not a parameter of this query (known: %s)", admin.ErrBadParameter, name, strings.Join(known, ", "))
		}
	}
	return one, nil
}

// FlightsQuery answers the admin query "flights" (GET /v1/flights):
// parameters day (yyyy-mm-dd), status (ACTIVE, DELETED), flno (a flight
// number), flid (repeatable, or comma-separated), after (the cursor: the previous page's next) and
// limit (default 100, at most 1000). The answer is a FlightPage: each
// flight as the schd events carry it.
func FlightsQuery(db store.Querier) func(ctx context.Context, params map[string][]string) (any, error) {
	return func(ctx context.Context, params map[string][]string) (any, error) {
		one, err := queryParams(params, []string{"day", "status", "flno", "after", "limit"}, []string{"flid"})
		if err != nil {
			return nil, err
		}
		f := FlightFilter{Day: one["day"], Status: strings.ToUpper(one["status"]), FLNO: strings.TrimSpace(one["flno"]), After: one["after"]}
		for _, v := range params["flid"] {
			for _, id := range strings.Split(v, ",") {
				if id = strings.TrimSpace(id); id != "" {
					f.FLIDs = append(f.FLIDs, id)
				}
			}
		}
		if s, ok := one["limit"]; ok {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				return nil, fmt.Errorf("%w: limit %q: want 1 to %d", admin.ErrBadParameter, s, MaxFlightPage)
			}
			f.Limit = n
		}
		if err := f.check(); err != nil {
			return nil, fmt.Errorf("%w: %w", admin.ErrBadParameter, err)
		}
		return QueryFlights(ctx, db, f)
	}
}
