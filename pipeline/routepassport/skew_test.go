package routepassport

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// TestRelayTimesAreTheDatabases: an instance whose host clock runs ten
// minutes ahead relays its events with the database's time, not its own:
// the leases it takes and the times it writes are judged by the other
// instances' relays, which would otherwise wait ten minutes more for its
// leases to end. The sent mark's time is the trace of that clock.
func TestRelayTimesAreTheDatabases(t *testing.T) {
	e := newEnv(t, 1)
	db := storetest.NewPostgres(t, store.WithMigrate(Schema()))
	ahead := clock.Offset{Base: clock.Real{}, D: 10 * time.Minute}
	p := newPipeline(t, db, e.broker(testkit.Quiet()), append(e.options(prometheus.NewRegistry(), testkit.Quiet()), WithClock(ahead))...)
	startPipeline(t, p)
	in := e.reader(e.routeIn)
	e.produce(record("R-ahead", "ahead", line(1)))
	in.waitFor(t, 1, 60*time.Second)
	// The relay marks an event sent after the broker's acknowledgement: both
	// events (route-in and georeference) are marked within the bound.
	var sent int
	var latest time.Time
	for deadline := time.Now().Add(30 * time.Second); ; {
		if err := db.QueryRow(context.Background(), "SELECT COUNT(*), COALESCE(MAX(done_at), 'epoch') FROM msgx_outbox_sent").Scan(&sent, &latest); err != nil {
			t.Fatal(err)
		}
		if sent >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if sent < 2 || time.Until(latest) > 5*time.Second {
		t.Fatalf("%d sent, the latest marked sent at %v, %s from now: the host's time, not the database's", sent, latest, time.Until(latest).Round(time.Second))
	}
}
