package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/msgx/msgx/admin"
	"github.com/msgx/msgx/pipeline/sis"
)

// The flight pages read the SIS pipeline's registered queries ("flights",
// "flight-history", "message-effects") through the admin server, as the
// API does, and lay their answers out for an operator: the fields with the
// dictionary's labels (sis.Label), each collection as its own table.

// decodeAnswer turns a query's answer into the type the page reads (the
// query may hand back the value or its JSON shape alike).
func decodeAnswer(v any, out any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// flightRow is one flight of the search page.
type flightRow struct {
	FLID, FLNO, Day, Movement, Status, SODT string
	Version                                 int64
}

func (c *Console) flights(ctx context.Context, w http.ResponseWriter, r *http.Request, s session) {
	q := r.URL.Query()
	params := url.Values{}
	for _, k := range []string{"flid", "flno", "day", "status", "after"} {
		if v := strings.TrimSpace(q.Get(k)); v != "" {
			params.Set(k, v)
		}
	}
	params.Set("limit", "50")
	d := flightsView{Q: flightSearch{FLID: q.Get("flid"), FLNO: q.Get("flno"), Day: q.Get("day"), Status: q.Get("status")}}
	v, err := c.adm.Query(ctx, "flights", params)
	status := http.StatusOK
	if err != nil {
		status, d.noAnswer = c.noAnswerOf(r, err)
	} else {
		var ans sis.FlightPage
		if err := decodeAnswer(v, &ans); err != nil {
			c.fail(w, r, s, fmt.Errorf("console: the flight query's answer: %w", err))
			return
		}
		d.Flights = make([]flightRow, 0, len(ans.Flights))
		for _, f := range ans.Flights {
			d.Flights = append(d.Flights, flightRow{FLID: f.FLID, FLNO: f.Fields["FLNO"], Day: f.OperationDay, Movement: f.Fields["MVIN"],
				Status: f.Status, SODT: f.Fields["SODT"], Version: f.StateVersion})
		}
		if ans.Next != "" {
			d.Next = url.Values{}
			for k, vs := range params {
				if k != "limit" {
					d.Next[k] = vs
				}
			}
			d.Next.Set("after", ans.Next)
		}
	}
	c.render(w, status, c.view(s), flightsPage(d))
}

// labelled is a field as the flight page shows it.
type labelled struct {
	Name, Label, Value string
	// Kept marks a field the dictionary does not know, kept as sent.
	Kept bool
}

// collTable is a collection laid out as a table: a column per child name.
type collTable struct {
	Name, Label string
	Cols        []labelled // Name and Label of each column
	Rows        [][]string
}

// flightOne reads one flight by FLID; found is false when no flight has it.
func (c *Console) flightOne(ctx context.Context, flid string) (f sis.SchdEvent, found bool, err error) {
	v, err := c.adm.Query(ctx, "flights", url.Values{"flid": {flid}})
	if err != nil {
		return f, false, err
	}
	var ans sis.FlightPage
	if err := decodeAnswer(v, &ans); err != nil {
		return f, false, fmt.Errorf("console: the flight query's answer: %w", err)
	}
	for _, fl := range ans.Flights {
		if fl.FLID == flid {
			return fl, true, nil
		}
	}
	return f, false, nil
}

// pathFlight finds the flight the path's {flid} names; when it cannot, it
// answers the request and returns false.
func (c *Console) pathFlight(ctx context.Context, w http.ResponseWriter, r *http.Request, s session) (sis.SchdEvent, bool) {
	flid := r.PathValue("flid")
	f, found, err := c.flightOne(ctx, flid)
	if err != nil {
		c.fail(w, r, s, err)
		return f, false
	}
	if !found {
		c.refuse(w, r, http.StatusNotFound, "no flight "+flid+" (unknown, or moved to history by the sweep)")
		return f, false
	}
	return f, true
}

func (c *Console) flight(ctx context.Context, w http.ResponseWriter, r *http.Request, s session) {
	f, ok := c.pathFlight(ctx, w, r, s)
	if !ok {
		return
	}
	// The fields in the dictionary's order, then those it does not know.
	var fields []labelled
	known := map[string]bool{}
	for _, t := range sis.FieldTerms() {
		known[t.Name] = true
		if v, ok := f.Fields[t.Name]; ok {
			fields = append(fields, labelled{Name: t.Name, Label: t.Label, Value: v})
		}
	}
	for _, k := range sortedKeys(f.Fields) {
		if !known[k] {
			fields = append(fields, labelled{Name: k, Label: sis.Label(k), Value: f.Fields[k], Kept: true})
		}
	}
	var colls []collTable
	order := map[string]int{}
	for i, t := range sis.CollectionTerms() {
		order[t.Name] = i
	}
	names := sortedKeys(f.Collections)
	slices.SortStableFunc(names, func(a, b string) int { return rank(order, a) - rank(order, b) })
	for _, n := range names {
		colls = append(colls, asCollTable(n, f.Collections[n]))
	}
	c.render(w, http.StatusOK, c.view(s), flightPage(flightView{F: f, Fields: fields, Collections: colls}))
}

func rank(order map[string]int, name string) int {
	if i, ok := order[name]; ok {
		return i
	}
	return len(order)
}

// asCollTable lays a collection's items out as a table: a column per child
// (attributes first, as their item order has them), a child with children
// of its own shown as its JSON.
func asCollTable(name string, its []sis.Item) collTable {
	t := collTable{Name: name, Label: sis.Label(name)}
	var cols []string
	for _, it := range its {
		for _, k := range sortedKeys(it) {
			if !slices.Contains(cols, k) {
				cols = append(cols, k)
			}
		}
	}
	// Attributes (the sequence number first) lead.
	slices.SortStableFunc(cols, func(a, b string) int {
		return boolRank(strings.HasPrefix(b, "@")) - boolRank(strings.HasPrefix(a, "@"))
	})
	for _, k := range cols {
		t.Cols = append(t.Cols, labelled{Name: k, Label: sis.Label(k)})
	}
	for _, it := range its {
		row := make([]string, len(cols))
		for i, k := range cols {
			row[i] = cell(it[k])
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func (c *Console) flightJSON(ctx context.Context, w http.ResponseWriter, r *http.Request, s session) {
	f, ok := c.pathFlight(ctx, w, r, s)
	if !ok {
		return
	}
	b, _ := json.MarshalIndent(f, "", "  ") // a decoded answer always marshals
	c.render(w, http.StatusOK, c.view(s), flightJSONPage(f.FLID, string(b)))
}

// versionView is a version as the history page shows it.
type versionView struct {
	sis.Version
	// Number is the version's number (Version names the embedded value).
	Number      int64
	Fields      []fieldChange
	Collections []collChange
}

// fieldChange is a field before and after, with its label.
type fieldChange struct {
	sis.FieldChange
	Label string
}

// collChange is a collection before and after, both as tables.
type collChange struct {
	Name, Label   string
	Before, After *collTable
}

func (c *Console) flightHistory(ctx context.Context, w http.ResponseWriter, r *http.Request, s session) {
	flid := r.PathValue("flid")
	params := url.Values{"flid": {flid}, "limit": {"50"}}
	if b := r.URL.Query().Get("before"); b != "" {
		params.Set("before", b)
	}
	v, err := c.adm.Query(ctx, "flight-history", params)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	var ans sis.FlightHistoryPage
	if err := decodeAnswer(v, &ans); err != nil {
		c.fail(w, r, s, fmt.Errorf("console: the flight history's answer: %w", err))
		return
	}
	c.render(w, http.StatusOK, c.view(s), historyPage(historyView{FLID: flid, Versions: versionViews(ans.Versions), Next: ans.Next, Now: c.clk.Now()}))
}

func versionViews(vs []sis.Version) []versionView {
	out := make([]versionView, 0, len(vs))
	for _, v := range vs {
		vv := versionView{Version: v, Number: v.Version}
		for _, f := range v.Changes.Fields {
			vv.Fields = append(vv.Fields, fieldChange{FieldChange: f, Label: sis.Label(f.Name)})
		}
		for _, cc := range v.Changes.Collections {
			ch := collChange{Name: cc.Name, Label: sis.Label(cc.Name)}
			for _, side := range []struct {
				raw json.RawMessage
				dst **collTable
			}{{cc.Before, &ch.Before}, {cc.After, &ch.After}} {
				var its []sis.Item
				if json.Unmarshal(side.raw, &its) == nil && len(its) > 0 {
					t := asCollTable(cc.Name, its)
					*side.dst = &t
				}
			}
			vv.Collections = append(vv.Collections, ch)
		}
		out = append(out, vv)
	}
	return out
}

// messageEffects reads the flight versions a message made; nil when no
// pipeline answers the query here.
func (c *Console) messageEffects(ctx context.Context, stream string, id int64) ([]versionView, error) {
	v, err := c.adm.Query(ctx, "message-effects", url.Values{"stream": {stream}, "id": {strconv.FormatInt(id, 10)}})
	if err != nil {
		if admin.ErrorStatus(err) == http.StatusNotImplemented {
			return nil, nil
		}
		return nil, err
	}
	var eff sis.MessageEffects
	if err := decodeAnswer(v, &eff); err != nil {
		return nil, fmt.Errorf("console: the message's effects: %w", err)
	}
	return versionViews(eff.Versions), nil
}
