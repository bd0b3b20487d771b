package sis_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/pipeline/sis"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// failingOutbound is an outbound mailbox whose inserts fail with err.
type failingOutbound struct{ err error }

func (f failingOutbound) Insert(context.Context, []byte, time.Time) (int64, error) { return 0, f.err }
func (f failingOutbound) SentAt(context.Context, int64) (time.Time, bool, error) {
	return time.Time{}, false, nil
}

// TestRequestWhileTheMailboxIsUnavailable: a request the outbound mailbox
// could not take because it was unreachable is answered 503 with
// Retry-After (send it again later), and its record says the mailbox was
// unavailable; one the mailbox refused stays a 502.
func TestRequestWhileTheMailboxIsUnavailable(t *testing.T) {
	db := storetest.NewSQLite(t, store.WithMigrate(sis.Schema()))
	for _, tc := range []struct {
		code   driver.ErrorCode
		status int
		reason string
	}{
		{driver.Unavailable, 503, "not sent: the outbound mailbox is unavailable: "},
		{driver.Rejected, 502, "not sent: mailbox: "},
	} {
		out := failingOutbound{err: driver.Classify(tc.code, errors.New("mailbox: insert into coutmsgs: boom"))}
		c, err := sis.NewCoordinator(db, out, sis.WithRequestClock(clock.NewFake(t0)), sis.WithRequestLogger(testkit.Quiet()))
		if err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		c.Handler().ServeHTTP(w, httptest.NewRequest("POST", "/v1/requests", strings.NewReader(`{"kind":"RQRD","refType":"AIRL"}`)))
		if w.Code != tc.status || (tc.status == 503) != (w.Header().Get("Retry-After") != "") {
			t.Fatalf("%v: %d %q %s", tc.code, w.Code, w.Header().Get("Retry-After"), w.Body)
		}
		l, err := sis.ListRequests(context.Background(), db, "", 0, 1)
		if err != nil || len(l) != 1 || l[0].Status != sis.ReqExpired || !strings.HasPrefix(l[0].Reason, tc.reason) {
			t.Fatalf("%v: %v %+v", tc.code, err, l)
		}
	}
}
