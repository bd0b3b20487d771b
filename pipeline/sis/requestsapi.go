package sis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/msgx/msgx/admin"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/store"
)

// RequestsQuery answers the admin query "requests" (GET /v1/requests):
// parameters status (REGISTERED, SENT, WAITING, DONE, EXPIRED; all when
// absent), before (an id: the page below it) and limit (default 100, at
// most 1000). The answer is {"requests": [...], "next": <before of the next
// page, 0 at the end>}.
func RequestsQuery(db store.Querier) func(ctx context.Context, params map[string][]string) (any, error) {
	return func(ctx context.Context, params map[string][]string) (any, error) {
		one, err := queryParams(params, []string{"status", "before", "limit"}, nil)
		if err != nil {
			return nil, err
		}
		limit, before := 100, int64(0)
		if s, ok := one["limit"]; ok {
			if limit, err = strconv.Atoi(s); err != nil || limit <= 0 || limit > 1000 {
				return nil, fmt.Errorf("%w: limit %q: want 1 to 1000", admin.ErrBadParameter, s)
			}
		}
		if s, ok := one["before"]; ok {
			if before, err = strconv.ParseInt(s, 10, 64); err != nil || before < 0 {
				return nil, fmt.Errorf("%w: before %q: want a request id (the previous page's next)", admin.ErrBadParameter, s)
			}
		}
		status := strings.ToUpper(one["status"])
		if statuses := []string{ReqRegistered, ReqSent, ReqWaiting, ReqDone, ReqExpired}; status != "" && !slices.Contains(statuses, status) {
			return nil, fmt.Errorf("%w: status %q: want one of %s", admin.ErrBadParameter, one["status"], strings.Join(statuses, ", "))
		}
		list, err := ListRequests(ctx, db, status, before, limit)
		if err != nil {
			return nil, err
		}
		var next int64
		if len(list) == limit {
			next = list[len(list)-1].ID
		}
		return map[string]any{"requests": list, "next": next}, nil
	}
}

// requestBody is the JSON body of POST /v1/requests.
type requestBody struct {
	Kind    string    `json:"kind"`
	From    time.Time `json:"from"`
	To      time.Time `json:"to"`
	RefType string    `json:"refType"`
}

// Handler is POST /v1/requests: it sends a request, {"kind":"RQFD",
// "from":"2021-01-23T00:00:00+08:00","to":...} or {"kind":"RQRD",
// "refType":"GLST"}, and answers with the tracked request (201), 400 for a
// bad request, 409 in shadow mode, 503 (with Retry-After) when the outbound
// mailbox is unavailable, 502 when it refused the request or failed
// otherwise.
func (c *Coordinator) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b requestBody
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&b); err != nil {
			http.Error(w, "request body: "+err.Error(), http.StatusBadRequest)
			return
		}
		req, err := c.Request(r.Context(), b.Kind, RequestParams{From: b.From, To: b.To, RefType: b.RefType})
		switch {
		case errors.Is(err, ErrShadow):
			http.Error(w, err.Error(), http.StatusConflict)
			return
		case errors.Is(err, errBadRequest):
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		case driver.Code(err) == driver.Unavailable:
			// The mailbox is away, not the request wrong: try again later.
			w.Header().Set("Retry-After", "10")
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		case err != nil:
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(req)
	})
}
