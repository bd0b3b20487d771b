package sis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/msgx/msgx/store"
)

// FlightFilter selects the flights of a query page.
type FlightFilter struct {
	// Day is an operation day, yyyy-mm-dd ("" for all).
	Day string
	// Status is ACTIVE or DELETED ("" for both).
	Status string
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
	if f.Limit < 0 || f.Limit > MaxFlightPage {
		return FlightPage{}, fmt.Errorf("sis: flight query: limit %d: want 1 to %d", f.Limit, MaxFlightPage)
	}
	if f.Day != "" {
		if _, err := time.Parse(time.DateOnly, f.Day); err != nil {
			return FlightPage{}, fmt.Errorf("sis: flight query: day %q: want yyyy-mm-dd", f.Day)
		}
	}
	if f.Status != "" && f.Status != StatusActive && f.Status != StatusDeleted {
		return FlightPage{}, fmt.Errorf("sis: flight query: status %q: want %s or %s", f.Status, StatusActive, StatusDeleted)
	}
	q, err := queries.For(db.Dialect())
	if err != nil {
		return FlightPage{}, err
	}
	flids := f.FLIDs
	if flids == nil {
		flids = []string{}
	}
	rows, err := db.Query(ctx, q.Get("FlightPage"), f.Day, f.Status, listArg(db.Dialect(), flids), f.After, f.Limit+1)
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

// FlightsQuery answers the admin query "flights" (GET /v1/flights):
// parameters day (yyyy-mm-dd), status (ACTIVE, DELETED), flid (repeatable,
// or comma-separated), after (the cursor: the previous page's next) and
// limit (default 100, at most 1000). The answer is a FlightPage: each
// flight as the schd events carry it.
func FlightsQuery(db store.Querier) func(ctx context.Context, params map[string][]string) (any, error) {
	return func(ctx context.Context, params map[string][]string) (any, error) {
		get := func(k string) string {
			if v := params[k]; len(v) > 0 {
				return v[0]
			}
			return ""
		}
		f := FlightFilter{Day: get("day"), Status: strings.ToUpper(get("status")), After: get("after")}
		for _, v := range params["flid"] {
			for _, id := range strings.Split(v, ",") {
				if id = strings.TrimSpace(id); id != "" {
					f.FLIDs = append(f.FLIDs, id)
				}
			}
		}
		if s := get("limit"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil {
				return nil, fmt.Errorf("limit %q is not a number", s)
			}
			f.Limit = n
		}
		return QueryFlights(ctx, db, f)
	}
}
