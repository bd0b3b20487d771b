package admin_test

import (
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/msgx/msgx/admin"
	"github.com/msgx/msgx/pipeline/sis"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// FuzzAPIParameters sends the read API's paths any query and path text, on
// PostgreSQL with the SIS pipeline's queries: every answer is 200 or a
// refusal (400, 404) with a JSON reason, never a 500 and never the
// database's text. `go test` runs the seeds (the inputs that answered 500
// with PostgreSQL's error before); `go test -fuzz FuzzAPIParameters
// ./admin/` looks for more.
func FuzzAPIParameters(f *testing.F) {
	for _, seed := range []struct {
		path  uint8
		query string
		seg   string
	}{
		{0, "limit=abc", ""}, {0, "day=2024-02-30", ""}, {0, "status=X", ""}, {1, "limit=0", ""},
		{0, "after=%00", ""}, {0, "flid=%FF%FE", ""}, {1, "status=DONE%00", ""}, {2, "limit=-1", ""},
		{3, "class=EXHAUSTED%00", ""}, {3, "target=t%00", ""}, {3, "limit=abc&after=-1", ""}, {3, "source=in%C3%28box", ""},
		{4, "", "ev\x00"}, {4, "", "ev\xff"}, {5, "", "1\x00"}, {5, "", "99999999999999999999"},
		{0, "day=2003-12-15&status=active&limit=10&flid=F1,F2", ""}, {1, "before=100&limit=5", ""},
	} {
		f.Add(seed.path, seed.query, seed.seg)
	}
	db := storetest.NewPostgres(f, store.WithMigrate(sis.Schema(), admin.Schema()))
	srv, err := admin.New(admin.Config{DB: db, Streams: []admin.Stream{{Name: "s1"}}, Queries: map[string]admin.QueryFunc{
		"flights": sis.FlightsQuery(db), "requests": sis.RequestsQuery(db)}})
	if err != nil {
		f.Fatal(err)
	}
	paths := []string{"/v1/flights", "/v1/requests", "/all/flights", "/v1/dead", "/v1/dead/outbox/", "/v1/dead/inbox/s1/"}
	f.Fuzz(func(t *testing.T, path uint8, query, seg string) {
		p := paths[int(path)%len(paths)]
		if strings.HasSuffix(p, "/") {
			if seg == "" {
				return
			}
			p += url.PathEscape(seg)
		}
		req := httptest.NewRequest("GET", "/", nil)
		req.URL = &url.URL{Path: p, RawPath: "", RawQuery: query}
		if u, err := url.Parse(p); err == nil {
			req.URL.Path, req.URL.RawPath = u.Path, u.RawPath
		}
		req.RemoteAddr, req.Host = "127.0.0.1:50000", "127.0.0.1:8081"
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		body := rec.Body.String()
		var problem admin.Problem
		switch {
		case rec.Code >= 500:
			t.Fatalf("%s?%s: %d %s", p, query, rec.Code, body)
		case strings.Contains(body, "SQLSTATE") || strings.Contains(body, "ERROR:"):
			t.Fatalf("%s?%s: the database's text: %s", p, query, body)
		case rec.Code != 200 && rec.Code != 400 && rec.Code != 404:
			t.Fatalf("%s?%s: %d %s", p, query, rec.Code, body)
		case rec.Code != 200 && (json.Unmarshal(rec.Body.Bytes(), &problem) != nil || problem.Error == ""):
			t.Fatalf("%s?%s: %d without a reason: %s", p, query, rec.Code, body)
		}
	})
}
