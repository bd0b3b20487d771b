package routepassport

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgx/msgx/broker/brokertest"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// A record retried against a database that is cut: once it has failed
// stuck-after-failures times in a row, Check names the record
// (topic/partition/offset) and the failure, and the gauge counts the
// failures; the database back, the record is stored and Check is nil again.
func TestStuckRecordFailsCheck(t *testing.T) {
	e := newEnv(t, 1)
	db, proxy := cutDB(t)
	reg := prometheus.NewRegistry()
	p := newPipeline(t, db, e.broker(testkit.Quiet()), append(e.options(reg, testkit.Quiet()), WithDBTimeout(2*time.Second),
		WithStuckAfter(time.Hour, 5))...)
	startPipeline(t, p)
	if err := p.Check(context.Background()); err != nil {
		t.Fatalf("Check of a pipeline with nothing to do: %v", err)
	}

	proxy.Cut()
	e.produce(records("S", 0, 1)...)
	waitCheck(t, p, "the record to count as stuck", func(err error) bool {
		return err != nil && strings.Contains(err.Error(), "ingest of record "+e.input+"/0/0") &&
			strings.Contains(err.Error(), "transient failures in a row")
	})
	if n := gauge(t, reg, "route_passport_consecutive_failures"); n < 5 {
		t.Errorf("route_passport_consecutive_failures = %v while stuck, want at least 5", n)
	}

	proxy.Restore()
	waitCheck(t, p, "Check to pass with the record stored", func(err error) bool { return err == nil })
	if n := countRows(t, db, `SELECT count(*) FROM route_passport_sources`); n != 1 {
		t.Errorf("%d records stored, want 1", n)
	}
	if n := gauge(t, reg, "route_passport_consecutive_failures"); n != 0 {
		t.Errorf("route_passport_consecutive_failures = %v with nothing retried", n)
	}
}

// A record unacknowledged for longer than stuck-after fails Check, naming
// the input topic, however few its failures, and the age gauge shows it.
func TestOldUnacknowledgedRecordFailsCheck(t *testing.T) {
	e := newEnv(t, 1)
	db, proxy := cutDB(t)
	reg := prometheus.NewRegistry()
	p := newPipeline(t, db, e.broker(testkit.Quiet()), append(e.options(reg, testkit.Quiet()), WithDBTimeout(2*time.Second),
		WithStuckAfter(time.Second, 1_000_000))...)
	startPipeline(t, p)
	proxy.Cut()
	e.produce(records("U", 0, 1)...)
	waitCheck(t, p, "the record to count as stuck by its age", func(err error) bool {
		return err != nil && strings.Contains(err.Error(), "a record of "+e.input+" unacknowledged for") &&
			strings.Contains(err.Error(), "retrying "+e.input+"/0/0")
	})
	if age := gauge(t, reg, "route_passport_oldest_unacknowledged_seconds"); age < 1 {
		t.Errorf("route_passport_oldest_unacknowledged_seconds = %v while stuck, want at least 1", age)
	}
	proxy.Restore()
	waitCheck(t, p, "Check to pass with the record stored", func(err error) bool { return err == nil })
	if age := gauge(t, reg, "route_passport_oldest_unacknowledged_seconds"); age != 0 {
		t.Errorf("route_passport_oldest_unacknowledged_seconds = %v with nothing held", age)
	}
}

// cutDB opens a migrated database in a fresh schema behind a TCP proxy
// that can cut it.
func cutDB(t *testing.T) (*store.DB, *brokertest.Proxy) {
	t.Helper()
	return storetest.NewCuttablePostgres(t, store.WithMigrate(Schema()), store.WithLogger(testkit.Quiet()))
}

// waitCheck waits, within a bound, until p.Check's answer satisfies cond.
func waitCheck(t *testing.T, p *Pipeline, what string, cond func(error) bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := p.Check(context.Background())
		if cond(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: Check = %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// gauge reads a gauge without labels from g.
func gauge(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}
