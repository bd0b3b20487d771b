package sis_test

import (
	"encoding/json"
	"math/rand/v2"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/msgx/msgx/admin"
	"github.com/msgx/msgx/pipeline/sis"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// GET /v1/flights and /v1/requests answer a parameter they cannot take
// with 400 and the reason, never 500 or the database's text, and refuse a
// parameter they do not know; a bounded random walk over the parameters
// finds no 500 either.
func TestQueryParameters(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(sis.Schema()))
	srv, err := admin.New(admin.Config{DB: db, Queries: map[string]admin.QueryFunc{
		"flights": sis.FlightsQuery(db), "requests": sis.RequestsQuery(db)}})
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string, q url.Values) (int, string) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", path+"?"+q.Encode(), nil)
		// The open admin (no token) serves loopback clients at its own address.
		req.RemoteAddr, req.Host = "127.0.0.1:50000", "127.0.0.1:8081"
		srv.ServeHTTP(rec, req)
		var p admin.Problem
		_ = json.Unmarshal(rec.Body.Bytes(), &p)
		return rec.Code, p.Error
	}
	for _, c := range []struct {
		path   string
		q      url.Values
		reason string // "" for 200
	}{
		{"/v1/flights", url.Values{"day": {"2003-12-15"}, "status": {"active"}, "limit": {"10"}, "flid": {"F1,F2", "F3"}, "after": {"F0"}}, ""},
		{"/v1/flights", url.Values{"limit": {"0"}}, `bad parameter: limit "0": want 1 to 1000`},
		{"/v1/flights", url.Values{"limit": {"5000"}}, "bad parameter: limit 5000: want 1 to 1000"},
		{"/v1/flights", url.Values{"limit": {"ten"}}, `bad parameter: limit "ten"`},
		{"/v1/flights", url.Values{"day": {"16DEC03"}}, `bad parameter: day "16DEC03": want yyyy-mm-dd`},
		{"/v1/flights", url.Values{"status": {"GONE"}}, `bad parameter: status "GONE": want ACTIVE or DELETED`},
		{"/v1/flights", url.Values{"after": {"F\x00"}}, "bad parameter: after: holds a control character"},
		{"/v1/flights", url.Values{"flid": {"F\xff\xfe"}}, "bad parameter: flid: is not UTF-8"},
		{"/v1/flights", url.Values{"day": {"2003-12-15", "2003-12-16"}}, "bad parameter: day is given 2 times; give it once"},
		{"/v1/flights", url.Values{"dya": {"2003-12-15"}}, `bad parameter: "dya" is not a parameter of this query (known: after, day, flid, flno, limit, status)`},
		{"/all/flights", url.Values{"limit": {"-1"}}, `bad parameter: limit "-1"`},
		{"/v1/requests", url.Values{"status": {"expired"}, "limit": {"5"}, "before": {"100"}}, ""},
		{"/v1/requests", url.Values{"status": {"LOST"}}, `bad parameter: status "LOST": want one of REGISTERED, SENT, WAITING, DONE, EXPIRED`},
		{"/v1/requests", url.Values{"status": {"DONE\x00"}}, "bad parameter: status: holds a control character"},
		{"/v1/requests", url.Values{"before": {"99999999999999999999"}}, `bad parameter: before "99999999999999999999"`},
		{"/v1/requests", url.Values{"limit": {"1001"}}, `bad parameter: limit "1001": want 1 to 1000`},
		{"/v1/requests", url.Values{"page": {"2"}}, `bad parameter: "page" is not a parameter of this query (known: before, limit, status)`},
	} {
		code, reason := get(c.path, c.q)
		switch {
		case c.reason == "" && code != 200:
			t.Errorf("%s?%s: %d %s", c.path, c.q.Encode(), code, reason)
		case c.reason != "" && (code != 400 || !strings.HasPrefix(reason, c.reason)):
			t.Errorf("%s?%s: %d %q, want 400 %q", c.path, c.q.Encode(), code, reason, c.reason)
		}
	}

	// The random walk: known and unknown names, values of every sort of
	// byte. Every answer is 200 or a 400 that names the parameter.
	rnd := rand.New(rand.NewPCG(7, 11))
	names := map[string][]string{"/v1/flights": {"day", "status", "after", "limit", "flid", "x"}, "/v1/requests": {"status", "before", "limit", "y"}}
	pieces := []string{"", "0", "1", "-1", "1000", "2003-12-15", "ACTIVE", "DONE", "F1", ",", "'", "%", "\x00", "\xff", "é", "\n", strings.Repeat("9", 30)}
	for i := range 400 {
		path := []string{"/v1/flights", "/v1/requests"}[i%2]
		q := url.Values{}
		for range rnd.IntN(3) + 1 {
			var v strings.Builder
			for range rnd.IntN(3) + 1 {
				v.WriteString(pieces[rnd.IntN(len(pieces))])
			}
			name := names[path][rnd.IntN(len(names[path]))]
			q.Add(name, v.String())
		}
		code, reason := get(path, q)
		if code != 200 && (code != 400 || !strings.HasPrefix(reason, "bad parameter: ")) {
			t.Fatalf("%s?%s: %d %q", path, q.Encode(), code, reason)
		}
	}
}
