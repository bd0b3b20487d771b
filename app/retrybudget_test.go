package app

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/msgx/msgx/app/config"
	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// scripted is a publisher whose every send answers after delay with what
// answer says (nil: confirmed); it keeps the time of each send.
type scripted struct {
	delay  time.Duration
	answer func(now time.Time) error

	mu    sync.Mutex
	sends []time.Time
}

func (s *scripted) SendConfirmed(ctx context.Context, _ string, _ ...*broker.Message) error {
	now := time.Now()
	s.mu.Lock()
	s.sends = append(s.sends, now)
	s.mu.Unlock()
	if s.delay > 0 {
		t := time.NewTimer(s.delay)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return s.answer(now)
}

func (s *scripted) gaps() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for i := 1; i < len(s.sends); i++ {
		out = append(out, s.sends[i].Sub(s.sends[i-1]).Round(100*time.Millisecond).String())
	}
	return out
}

// TestRetryBudgetWithProductionSettings measures what the relay's retry
// budget decides with the sample production configuration's relay settings
// (deploy/msgx.production.yaml: 5 attempts, backoff 1 s doubling to 60 s
// with 20 % jitter, publish timeout 15 s), on PostgreSQL with the real
// clock, one event per target, each target's broker scripted:
//
//   - an error of the event's own (Unknown) at once: every attempt is spent
//     and the event is DEAD after the backoffs (1+2+4+8 s, about 15 s);
//   - the same error answered only after 2 s: the answers' time adds up too;
//   - rejected: DEAD at its first attempt;
//   - unavailable for 20 s, longer than that budget: no attempt is charged
//     and the event is sent once the broker answers.
//
// docs/reliability.md quotes the figures this logs.
func TestRetryBudgetWithProductionSettings(t *testing.T) {
	if testing.Short() {
		t.Skip("measures for about 30 s")
	}
	_, dsn := storetest.NewSchema(t)
	cfg, err := config.Load("../deploy/msgx.production.yaml", []string{
		"MSGX_STORE_DSN=" + dsn, "MSGX_MAILBOXES_SHARED_DSN=" + mariaDSN,
		"MSGX_ADMIN_READ_TOKEN=" + readTok, "MSGX_ADMIN_OPERATOR_TOKEN=" + opTok,
	}, adapters())
	if err != nil {
		t.Fatal(err)
	}
	rc := cfg.Relay
	if rc.MaxAttempts != 5 || rc.Backoff.Initial.D() != time.Second || rc.Backoff.Max.D() != time.Minute || rc.PublishTimeout.D() != 15*time.Second {
		t.Fatalf("the sample's relay settings changed (%+v): update this measurement and docs/reliability.md", rc)
	}
	db := openStore(t, dsn)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	start := time.Now()
	fail := func(code driver.ErrorCode) func(time.Time) error {
		return func(time.Time) error {
			return driver.Classify(code, errors.New(strings.ToLower(code.String())+" answer"))
		}
	}
	pubs := map[string]*scripted{
		"unknown":      {answer: fail(driver.Unknown)},
		"slow-unknown": {delay: 2 * time.Second, answer: fail(driver.Unknown)},
		"rejected":     {answer: fail(driver.Rejected)},
		"unavailable": {answer: func(now time.Time) error {
			if now.Sub(start) < 20*time.Second {
				return fail(driver.Unavailable)(now)
			}
			return nil
		}},
	}
	opts := append(relayPolicy(rc), outbox.WithLogger(testkit.Quiet()))
	var evs []outbox.Event
	for name, p := range pubs {
		opts = append(opts, outbox.Target(name, p, outbox.PerKey))
		evs = append(evs, outbox.Event{ID: "ev-" + name, Target: name, Topic: "t", Key: "k", Payload: []byte("{}")})
	}
	r, err := outbox.NewRelay(db, opts...)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); <-done; r.Close() }()
	if err := db.InTx(ctx, func(ctx context.Context, tx store.Tx) error { return outbox.Enqueue(ctx, tx, time.Now(), evs...) }); err != nil {
		t.Fatal(err)
	}

	want := map[string]outbox.Status{"unknown": outbox.StatusDead, "slow-unknown": outbox.StatusDead, "rejected": outbox.StatusDead, "unavailable": outbox.StatusSent}
	recs := map[string]outbox.Record{}
	testkit.Eventually(t, "every event finished", 90*time.Second, func() bool {
		for name := range pubs {
			rec, err := outbox.Get(ctx, db, "ev-"+name)
			if err != nil {
				t.Fatal(err)
			}
			recs[name] = rec
			if rec.Status != want[name] {
				return false
			}
		}
		return true
	})
	took := func(name string) time.Duration { return recs[name].DoneAt.Sub(recs[name].CreatedAt) }
	for _, name := range []string{"unknown", "slow-unknown", "rejected", "unavailable"} {
		t.Logf("%-12s %-4s after %5.1f s, %d attempts charged, %d sends, gaps %v", name, recs[name].Status, took(name).Seconds(),
			recs[name].Attempts, len(pubs[name].sends), pubs[name].gaps())
	}
	check := func(ok bool, format string, args ...any) {
		t.Helper()
		if !ok {
			t.Errorf(format, args...)
		}
	}
	u, s := recs["unknown"], recs["slow-unknown"]
	check(u.Attempts == 5 && took("unknown") > 11*time.Second && took("unknown") < 25*time.Second,
		"unknown: %d attempts in %s, want 5 in about 15 s", u.Attempts, took("unknown"))
	check(s.Attempts == 5 && took("slow-unknown") > took("unknown")+7*time.Second,
		"slow unknown: %d attempts in %s, want 5 with the answers' 10 s on top", s.Attempts, took("slow-unknown"))
	check(recs["rejected"].Attempts == 1 && took("rejected") < 3*time.Second,
		"rejected: %d attempts in %s, want DEAD at the first", recs["rejected"].Attempts, took("rejected"))
	check(took("unavailable") >= 20*time.Second && recs["unavailable"].Attempts <= 1,
		"unavailable: sent after %s with %d attempts charged", took("unavailable"), recs["unavailable"].Attempts)
}
