package main

import (
	"bytes"
	"context"
	"errors"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/admin"
	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// rejectFirst is a broker that rejects the event ev-1 and takes the rest.
type rejectFirst struct{}

func (rejectFirst) SendConfirmed(_ context.Context, _ string, msgs ...*broker.Message) error {
	for _, m := range msgs {
		if m.Header(broker.HeaderEventID) == "ev-1" {
			return driver.Classify(driver.Rejected, errors.New("message too large"))
		}
	}
	return nil
}

// A key of a per-key target held by a DEAD event: msgx status names the key
// and the event, the replay's dry run says how many events wait behind it,
// and msgx skip previews, then carries out, the skip.
func TestStatusReplayAndSkipOfABlockedKey(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(buildLines()...))
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC))
	r, err := outbox.NewRelay(db, outbox.WithClock(clk), outbox.WithDatabaseClock(false), outbox.Target("kafka:msg", rejectFirst{}, outbox.PerKey))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		var evs []outbox.Event
		for _, id := range []string{"ev-1", "ev-2", "ev-3", "ev-4"} {
			evs = append(evs, outbox.Event{ID: id, Target: "kafka:msg", Topic: "x", Key: "CA1234/2026-12-06", Payload: []byte("{}")})
		}
		return outbox.Enqueue(ctx, tx, clk.Now(), evs...)
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	srv, err := admin.New(admin.Config{DB: db, Targets: []string{"kafka:msg"}, TargetStates: r.Targets, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	msgx := func(args ...string) (string, error) {
		var out bytes.Buffer
		root := newRoot()
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append(args, "--admin", hs.URL))
		err := root.ExecuteContext(context.Background())
		return out.String(), err
	}

	out, err := msgx("status")
	if err != nil || !strings.Contains(out, "BLOCKED KEY") || !regexp.MustCompile(`CA1234/2026-12-06\s+kafka:msg\s+ev-1\s+2026-12-06T03:00:00Z \(0 s ago\)\s+3\n`).MatchString(out) {
		t.Errorf("status: %v\n%s", err, out)
	}
	out, err = msgx("replay", "--source", "outbox", "--target", "kafka:msg", "--reason", "look")
	if err != nil || !strings.Contains(out, "waiting behind ev-1: 3 events of its key (sent after it, in order)") {
		t.Errorf("replay dry run: %v\n%s", err, out)
	}
	out, err = msgx("skip", "--ids", "ev-1,ev-2", "--reason", "cannot be fixed")
	if err == nil || !strings.Contains(out, "1 would be skipped (they stay DEAD, marked skipped): ev-1") ||
		!strings.Contains(out, "refused ev-2: status PENDING") || !strings.Contains(out, "dry run: nothing changed") {
		t.Errorf("skip dry run: %v\n%s", err, out)
	}
	if rec, err := outbox.Get(ctx, db, "ev-1"); err != nil || rec.SkippedAt != nil {
		t.Fatalf("the dry run skipped: %+v %v", rec, err)
	}
	out, err = msgx("skip", "--ids", "ev-1", "--reason", "cannot be fixed", "--yes")
	if err != nil || !strings.Contains(out, "1 skipped (they stay DEAD, marked skipped): ev-1") ||
		!strings.Contains(out, "waiting behind ev-1: 3 events of its key (sent now, in order)") {
		t.Errorf("skip: %v\n%s", err, out)
	}
	if rec, err := outbox.Get(ctx, db, "ev-1"); err != nil || rec.SkippedAt == nil || rec.Status != outbox.StatusDead {
		t.Fatalf("after the skip: %+v %v", rec, err)
	}
	if out, err = msgx("status"); err != nil || strings.Contains(out, "BLOCKED KEY") {
		t.Errorf("status after the skip: %v\n%s", err, out)
	}
}
