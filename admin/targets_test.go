package admin

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// downPublisher is a broker that is away: every send is Unavailable.
type downPublisher struct{}

func (downPublisher) SendConfirmed(context.Context, string, ...*broker.Message) error {
	return driver.Classify(driver.Unavailable, errors.New("dial tcp 127.0.0.1:9092: connection refused"))
}

// GET /v1/status shows, per relay target, whether this process's relay has
// it paused and its last send error.
func TestStatusShowsPausedTargets(t *testing.T) {
	db := storetest.NewSQLite(t, store.WithMigrate(Schema()))
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC))
	r, err := outbox.NewRelay(db, outbox.WithClock(clk), outbox.WithDatabaseClock(false), outbox.Target("t1", downPublisher{}, outbox.PerKey), outbox.Target("t2", downPublisher{}, outbox.PerKey))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		return outbox.Enqueue(ctx, tx, clk.Now(), outbox.Event{ID: "ev-1", Target: "t1", Topic: "x", Key: "k", Payload: []byte("{}")})
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{DB: db, Targets: []string{"t1", "t2"}, TargetStates: r.Targets})
	if err != nil {
		t.Fatal(err)
	}
	st, err := srv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Targets) != 2 {
		t.Fatalf("targets %+v", st.Targets)
	}
	t1, t2 := st.Targets[0], st.Targets[1]
	if !t1.Paused || t1.PausedSince == nil || !t1.PausedSince.Equal(clk.Now()) || !strings.Contains(t1.LastError, "connection refused") ||
		t1.LastErrorAt == nil || t1.Pending != 1 {
		t.Fatalf("t1: %+v", t1)
	}
	if t2.Paused || t2.PausedSince != nil || t2.LastError != "" || t2.LastErrorAt != nil {
		t.Fatalf("t2 (never sent to): %+v", t2)
	}
}
