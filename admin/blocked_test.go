package admin

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// rejectA1 is a broker that rejects the event ev-A-1 and takes the rest.
type rejectA1 struct{ got []string }

func (p *rejectA1) SendConfirmed(_ context.Context, _ string, msgs ...*broker.Message) error {
	for _, m := range msgs {
		if m.Header(broker.HeaderEventID) == "ev-A-1" {
			return driver.Classify(driver.Rejected, errors.New("message too large"))
		}
	}
	for _, m := range msgs {
		p.got = append(p.got, m.Header(broker.HeaderEventID))
	}
	return nil
}

// A DEAD event of a per-key target holds its key: the status names the key
// and the event, the metrics count and name it, the replay preview says how
// many events wait behind it, and an audited skip lets them go.
func TestBlockedKeyStatusPreviewAndSkip(t *testing.T) {
	storetest.Each(t, []store.Line{Schema()}, func(t *testing.T, db *store.DB) {
		ctx := context.Background()
		clk := clock.NewFake(time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC))
		pub := &rejectA1{}
		r, err := outbox.NewRelay(db, outbox.WithClock(clk), outbox.WithDatabaseClock(false), outbox.Target("p", pub, outbox.PerKey), outbox.Target("u", pub, outbox.Unordered))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		ev := func(id, target, key string) outbox.Event {
			return outbox.Event{ID: id, Target: target, Topic: "x", Key: key, Payload: []byte("{}")}
		}
		if err := db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
			return outbox.Enqueue(ctx, tx, clk.Now(), ev("ev-A-1", "p", "A"), ev("ev-A-2", "p", "A"), ev("ev-A-3", "p", "A"), ev("ev-B-1", "p", "B"))
		}); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if _, err := r.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			clk.Advance(time.Minute) // a rejected batch's retry is due
		}
		srv, err := New(Config{DB: db, Targets: []string{"p", "u"}, TargetStates: r.Targets, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		st, err := srv.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		p := st.Targets[0]
		if p.Lane != "per-key" || p.BlockedKeys != 1 || len(p.Blocked) != 1 || p.Blocked[0].Key != "A" ||
			p.Blocked[0].EventID != "ev-A-1" || p.Blocked[0].Waiting != 2 || p.Pending != 2 || p.Dead != 1 {
			t.Fatalf("status of p: %+v", p)
		}
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(srv.Collector())
		want := `# HELP msgx_outbox_blocked_key_waiting Events waiting behind the DEAD event event_id that holds key of a per-key target; the first keys only (oldest dead event first, as many as the status lists).
# TYPE msgx_outbox_blocked_key_waiting gauge
msgx_outbox_blocked_key_waiting{event_id="ev-A-1",key="A",target="p"} 2
# HELP msgx_outbox_blocked_keys Keys of a per-key target held by a DEAD event that was neither replayed nor skipped: their later events wait. 0 for a per-key target with none; absent for other lanes.
# TYPE msgx_outbox_blocked_keys gauge
msgx_outbox_blocked_keys{target="p"} 1
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "msgx_outbox_blocked_keys", "msgx_outbox_blocked_key_waiting"); err != nil {
			t.Error(err)
		}

		prev, err := srv.Replay(ctx, "alice", ReplayRequest{Source: "outbox", Target: "p", DryRun: true, Reason: "look"})
		if err != nil {
			t.Fatal(err)
		}
		if len(prev.Replayed) != 1 || prev.Waiting["ev-A-1"] != 2 {
			t.Fatalf("replay preview: %+v, want ev-A-1 with 2 waiting", prev)
		}

		if _, err := srv.Skip(ctx, "alice", SkipRequest{IDs: []string{"ev-A-1"}}); err == nil {
			t.Fatal("a skip without a reason was accepted")
		}
		res, err := srv.Skip(ctx, "alice", SkipRequest{IDs: []string{"ev-A-1", "ev-B-1", "nope"}, Reason: "payload cannot be fixed"})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Skipped) != 1 || res.Skipped[0] != "ev-A-1" || res.Waiting["ev-A-1"] != 2 ||
			res.Refused["nope"] != "not found" || !strings.HasPrefix(res.Refused["ev-B-1"], "status ") {
			t.Fatalf("skip: %+v", res)
		}
		for range 3 {
			if _, err := r.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			clk.Advance(time.Minute) // a rejected batch's retry is due
		}
		if got := strings.Join(pub.got, ","); got != "ev-B-1,ev-A-2,ev-A-3" && got != "ev-A-2,ev-B-1,ev-A-3" && got != "ev-A-2,ev-A-3,ev-B-1" {
			t.Fatalf("sent %s, want A:2 then A:3 after the skip, and B:1", got)
		}
		if rec, err := outbox.Get(ctx, db, "ev-A-1"); err != nil || rec.Status != outbox.StatusDead || rec.SkippedAt == nil {
			t.Fatalf("ev-A-1 after the skip: %+v %v", rec, err)
		}
		if st, err = srv.Status(ctx); err != nil || st.Targets[0].BlockedKeys != 0 || len(st.Targets[0].Blocked) != 0 {
			t.Fatalf("status after the skip: %+v %v", st.Targets, err)
		}
		var action, actor, reason string
		var count int
		if err := db.QueryRow(ctx, "SELECT action, actor, reason, count FROM msgx_admin_audit WHERE action = 'skip'").Scan(&action, &actor, &reason, &count); err != nil {
			t.Fatal(err)
		}
		if actor != "alice" || reason != "payload cannot be fixed" || count != 1 {
			t.Fatalf("audit: %s %s %s %d", action, actor, reason, count)
		}
	})
}
