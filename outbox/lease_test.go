package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// TestNoSendAfterTheLease runs a relay against a slow broker: each send takes
// 25 s of its clock, so one cycle of four sends (one per topic) outlasts the
// one-minute lease. In the middle of the third send a second relay looks for
// work. The first relay must hold its lease across the cycle (extending it
// before a send that could outlast it): otherwise the second relay takes the
// heads whose lease ran out, sends them and their successors, and the first
// one then sends heads after their successors.
func TestNoSendAfterTheLease(t *testing.T) {
	storetest.Each(t, []store.Line{outbox.Schema()}, func(t *testing.T, db *store.DB) {
		clk := clock.NewFake(t0)
		dest := newOrderSink()
		opts := []outbox.Option{outbox.WithLease(time.Minute), outbox.WithPublishTimeout(20 * time.Second), outbox.WithDBTimeout(time.Second)}
		var (
			b       *outbox.Relay
			bStats  outbox.Stats
			bErr    error
			sends   int
			mu      sync.Mutex
			slowPub = publisherFunc(func(ctx context.Context, topic string, msgs ...*broker.Message) error {
				mu.Lock()
				sends++
				n := sends
				mu.Unlock()
				clk.Advance(25 * time.Second)
				if n == 3 {
					bStats, bErr = b.Flush(ctx)
				}
				return dest.SendConfirmed(ctx, topic, msgs...)
			})
		)
		a := newRelay(t, db, clk, append(opts, outbox.Target("p", slowPub, outbox.PerKey))...)
		b = newRelay(t, db, clk, append(opts, outbox.Target("p", dest, outbox.PerKey))...)
		var evs []outbox.Event
		for _, k := range []string{"K1", "K2", "K3", "K4"} {
			for seq := 1; seq <= 2; seq++ {
				evs = append(evs, outbox.Event{ID: fmt.Sprintf("%s.%d", k, seq), Target: "p", Topic: "t" + k, Key: k})
			}
		}
		enqueue(t, db, t0, evs...)

		st := flush(t, a)
		if bErr != nil {
			t.Fatal(bErr)
		}
		if bStats.Claimed != 0 {
			t.Fatalf("the second relay claimed %+v while the first held the rows", bStats)
		}
		if st.Published != 8 || st.LeaseLost != 0 {
			t.Fatalf("first relay: %+v", st)
		}
		dest.mu.Lock()
		defer dest.mu.Unlock()
		if len(dest.violations) > 0 || dest.dups > 0 {
			t.Fatalf("order violations %v, duplicates %d", dest.violations, dest.dups)
		}
	})
}

// TestLeasesOnTheDatabaseClock runs two relays whose hosts' clocks are 50 s
// apart on either side of the database's: with each host's own clock, the
// one running ahead would see the other's one-minute lease as ended after
// 10 s and take its rows. Both read the database's clock instead.
func TestLeasesOnTheDatabaseClock(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(outbox.Schema()))
	behind := clock.NewFake(time.Now().Add(-50 * time.Second))
	ahead := clock.NewFake(time.Now().Add(50 * time.Second))
	stuck := &sink{block: make(chan struct{}), entered: make(chan int, 1)}
	fresh := &sink{}
	opts := func(host clock.Clock) []outbox.Option {
		return []outbox.Option{outbox.WithClock(host), outbox.WithLogger(testkit.Quiet()), outbox.WithLease(time.Minute),
			outbox.WithPublishTimeout(20 * time.Second), outbox.WithDBTimeout(5 * time.Second)}
	}
	newR := func(host clock.Clock, pub outbox.Publisher) *outbox.Relay {
		r, err := outbox.NewRelay(db, append(opts(host), outbox.Target("p", pub, outbox.PerKey))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		return r
	}
	a, b := newR(behind, stuck), newR(ahead, fresh)
	enqueue(t, db, time.Now().Add(-time.Hour), ev("p", "A", 1), ev("p", "B", 1))

	done := make(chan error, 1)
	go func() {
		_, err := a.Flush(context.Background())
		done <- err
	}()
	<-stuck.entered
	st, err := b.Flush(context.Background())
	close(stuck.block)
	if aerr := <-done; aerr != nil {
		t.Fatal(aerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	if st.Claimed != 0 {
		t.Fatalf("the relay whose host runs ahead claimed %+v under the other's lease", st)
	}
	if n := countStatus(t, db, outbox.StatusSent); n != 2 {
		t.Fatalf("%d sent, want 2", n)
	}
}

// TestLeaseExpiriesHaveTheirOwnLimit: an event whose relays keep stopping
// while they hold it goes DEAD once its lease expired more often than
// WithMaxLeaseExpiries allows, with a reason saying so, however few of its
// own attempts it used.
func TestLeaseExpiriesHaveTheirOwnLimit(t *testing.T) {
	storetest.Each(t, []store.Line{outbox.Schema()}, func(t *testing.T, db *store.DB) {
		clk := clock.NewFake(t0)
		enqueue(t, db, t0, ev("p", "A", 1))
		var stuck []*sink
		var wg sync.WaitGroup
		for range 2 {
			s := &sink{block: make(chan struct{}), entered: make(chan int, 1)}
			r := newRelay(t, db, clk, outbox.Target("p", s, outbox.PerKey))
			wg.Go(func() { _, _ = r.Flush(context.Background()) })
			<-s.entered
			stuck = append(stuck, s)
			clk.Advance(outbox.DefaultLease)
		}
		defer wg.Wait()
		for _, s := range stuck {
			defer close(s.block)
		}
		s := &sink{}
		r := newRelay(t, db, clk, outbox.WithMaxLeaseExpiries(1), outbox.Target("p", s, outbox.PerKey))
		if st := flush(t, r); st.Dead != 1 || s.count() != 0 {
			t.Fatalf("%+v, sent %d", st, s.count())
		}
		rec := get(t, db, "p-A-1")
		if rec.Status != outbox.StatusDead || rec.Attempts != 3 || rec.LeaseExpiries != 2 || !strings.Contains(rec.LastError, "expired without a result 2 times") {
			t.Fatalf("%+v", rec)
		}
	})
}

// TestEventsOfAHostAheadAreDueAtOnce: a producer whose host clock runs ten
// minutes ahead enqueues events (one alone, two in one statement, one
// without a key). They are due at once for a relay on the database's clock:
// a producer's clock must not delay its events by its error.
func TestEventsOfAHostAheadAreDueAtOnce(t *testing.T) {
	for _, kind := range []outbox.LaneKind{outbox.PerKey, outbox.Unordered} {
		t.Run(kind.String(), func(t *testing.T) {
			db := storetest.NewPostgres(t, store.WithMigrate(outbox.Schema()))
			ahead := time.Now().Add(10 * time.Minute)
			enqueue(t, db, ahead, ev("p", "A", 1))
			enqueue(t, db, ahead, ev("p", "B", 2), ev("p", "C", 3))
			enqueue(t, db, ahead, ev("p", "", 4))
			s := &sink{}
			r, err := outbox.NewRelay(db, outbox.WithClock(clock.Real{}), outbox.WithLogger(testkit.Quiet()), outbox.Target("p", s, kind))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(r.Close)
			if st := flush(t, r); st.Published != 4 || s.count() != 4 {
				t.Fatalf("%+v, %d on the wire: want the 4 events of the host ahead published at once", st, s.count())
			}
		})
	}
}

// TestDeadOnlyWhenMarkedDead runs a relay whose send outlasts its lease and
// then fails for the event itself (Rejected): meanwhile a second relay took
// the row and sent it. The first relay's DEAD statement, fenced by its
// lease, finds no row: the event is not DEAD, so the first relay must not
// count it (Stats, msgx_outbox_dead_total) nor log it as dead.
func TestDeadOnlyWhenMarkedDead(t *testing.T) {
	storetest.Each(t, []store.Line{outbox.Schema()}, func(t *testing.T, db *store.DB) {
		clk := clock.NewFake(t0)
		dest := &sink{}
		var logs testkit.Buffer
		reg := prometheus.NewRegistry()
		opts := []outbox.Option{outbox.WithLease(time.Minute), outbox.WithPublishTimeout(20 * time.Second), outbox.WithDBTimeout(time.Second)}
		var (
			b      *outbox.Relay
			bStats outbox.Stats
			bErr   error
		)
		slow := publisherFunc(func(ctx context.Context, topic string, msgs ...*broker.Message) error {
			clk.Advance(2 * time.Minute) // the lease runs out under the send
			bStats, bErr = b.Flush(ctx)
			return driver.Classify(driver.Rejected, errors.New("record too large"))
		})
		a := newRelay(t, db, clk, append(opts, outbox.Target("u", slow, outbox.Unordered),
			outbox.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))), outbox.WithRegisterer(reg))...)
		b = newRelay(t, db, clk, append(opts, outbox.Target("u", dest, outbox.Unordered))...)
		enqueue(t, db, t0, ev("u", "K", 1))

		st := flush(t, a)
		if bErr != nil || bStats.Published != 1 {
			t.Fatalf("second relay: %+v %v", bStats, bErr)
		}
		if st.Dead != 0 || st.LeaseLost != 1 {
			t.Errorf("first relay counted %+v, want no DEAD and one lease lost", st)
		}
		if rec := get(t, db, "u-K-1"); rec.Status != outbox.StatusSent {
			t.Errorf("event: %+v, want SENT", rec)
		}
		if n := metricSum(t, reg, "msgx_outbox_dead_total"); n != 0 {
			t.Errorf("msgx_outbox_dead_total = %v, want 0", n)
		}
		if strings.Contains(logs.String(), "outbox event dead") || !strings.Contains(logs.String(), "lease lost before the event was marked dead") {
			t.Errorf("log:\n%s", logs.String())
		}
	})
}

// metricSum is the sum of every series of the metric name in reg (0 when it
// has none).
func metricSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}
