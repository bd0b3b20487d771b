package brokersource_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/source/brokersource"
	"github.com/msgx/msgx/source/mailbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// A stop while a delivery waits to retry its store against a database that
// is cut ends at once, not after the retry's delay or the stop timeout; the
// delivery stays unsettled, and the next run, with the database back,
// stores it.
func TestStopDuringAStoreRetryIsPrompt(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db, proxy := storetest.NewCuttablePostgres(t, store.WithMigrate(mailbox.Schema()))
	t.Cleanup(db.Close)
	topic, group := storetest.UniqueName("bsrc-stop"), "msgx"
	log := testkit.Quiet()
	b := startRabbit(ctx, t, log, topic, group)
	listening := &listeningHandler{}
	source := func(reg prometheus.Registerer) *brokersource.Source {
		src, err := brokersource.New(b, broker.Subscription{Topic: topic, Group: group}, db, "s", brokersource.WithLogger(slog.New(listening)),
			brokersource.WithRegisterer(reg), brokersource.WithTimeout(time.Second), brokersource.WithStopTimeout(30*time.Second),
			// One retry a minute: a stop that waits for it shows.
			brokersource.WithRetry(backoff.Policy{Initial: time.Minute, Max: time.Minute}))
		if err != nil {
			t.Fatal(err)
		}
		return src
	}
	reg := prometheus.NewRegistry()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- source(reg).Run(runCtx, nil) }()

	proxy.Cut()
	testkit.Eventually(t, "the listener to run", patience, listening.seen.Load)
	if err := b.SendConfirmed(ctx, topic, &broker.Message{Payload: []byte("during the outage")}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "a failed store, waiting to retry", patience, func() bool { return counter(t, reg, "msgx_source_broker_store_failures_total") >= 1 })
	began := time.Now()
	stop()
	select {
	case <-done:
		if took := time.Since(began); took > 2*time.Second {
			t.Errorf("the stop took %s: it waited for the retry", took)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not return within a minute of the stop")
	}

	proxy.Restore()
	runCtx2, stop2 := context.WithCancel(ctx)
	done2 := make(chan error, 1)
	go func() { done2 <- source(prometheus.NewRegistry()).Run(runCtx2, nil) }()
	defer func() { stop2(); <-done2 }()
	testkit.Eventually(t, "the message stored after the restart", patience, func() bool {
		rs := rows(t, db, "s")
		return len(rs) == 1 && rs[0].payload == "during the outage"
	})
}

// listeningHandler notes the source's "listening" line.
type listeningHandler struct{ seen atomic.Bool }

func (h *listeningHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *listeningHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "broker source listening" {
		h.seen.Store(true)
	}
	return nil
}
func (h *listeningHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *listeningHandler) WithGroup(string) slog.Handler      { return h }

// counter is the value of a counter of reg (-1: not there yet).
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			sum := 0.0
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
			return sum
		}
	}
	return -1
}
