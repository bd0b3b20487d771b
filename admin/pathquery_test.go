package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// TestPathQueries: a flight's history and a message's effects are the
// registered queries with the path's values as their parameters (in place
// of the query string's), under the read scope.
func TestPathQueries(t *testing.T) {
	echo := func(ctx context.Context, params map[string][]string) (any, error) { return params, nil }
	srv, err := New(Config{DB: storetest.NewSQLite(t, store.WithMigrate(Schema())), ReadToken: "r", OperatorToken: "o", Hosts: []string{"example.com"},
		Queries: map[string]QueryFunc{"flight-history": echo, "message-effects": echo}})
	if err != nil {
		t.Fatal(err)
	}
	get := func(path, tok string) (int, url.Values) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", path, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		srv.ServeHTTP(rec, req)
		var v url.Values
		if rec.Code == http.StatusOK {
			if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
				t.Fatalf("%s: %v: %s", path, err, rec.Body)
			}
		}
		return rec.Code, v
	}
	if code, v := get("/v1/flights/15/history?limit=2&flid=16", "r"); code != 200 || v.Get("flid") != "15" || v.Get("limit") != "2" || len(v["flid"]) != 1 {
		t.Errorf("history: %d %v", code, v)
	}
	if code, v := get("/v1/messages/sis/7/effects", "r"); code != 200 || v.Get("stream") != "sis" || v.Get("id") != "7" {
		t.Errorf("effects: %d %v", code, v)
	}
	if code, _ := get("/v1/flights/15/history", ""); code != http.StatusUnauthorized {
		t.Errorf("history without a token: %d", code)
	}
}
