package inbox_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// preparing is the test processor with a Preparer that records what it was
// given, writes a row, and then does what fail says.
type preparing struct {
	*testProc
	mu      sync.Mutex
	batches [][]string
	fail    string // "", "error" or "panic"
}

func (p *preparing) Prepare(ctx context.Context, tx store.Tx, batch []any) error {
	var vals []string
	for _, v := range batch {
		vals = append(vals, v.(string))
	}
	p.mu.Lock()
	p.batches = append(p.batches, vals)
	fail := p.fail
	p.mu.Unlock()
	if _, err := tx.Exec(ctx, ph(tx, "INSERT INTO parent (id) VALUES ($1)"), 777+len(p.batches)); err != nil {
		return err
	}
	switch fail {
	case "error":
		return errors.New("read-ahead broke")
	case "panic":
		panic("read-ahead bug")
	}
	return nil
}

func (p *preparing) seen() [][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.batches)
}

// TestPreparerReadsAheadForTheBatch: a Preparer gets the decoded values of
// the batch's messages that decoded, before any is processed, in the
// batch's transaction; one that fails or panics is rolled back alone and the
// batch is processed without it.
func TestPreparerReadsAheadForTheBatch(t *testing.T) {
	for _, fail := range []string{"", "error", "panic"} {
		t.Run("fail="+fail, func(t *testing.T) {
			storetest.Each(t, []store.Line{inbox.Schema(), outbox.Schema()}, func(t *testing.T, db *store.DB) {
				f := newFixture(t, db, inbox.WithGroupSize(10))
				p := &preparing{testProc: f.proc, fail: fail}
				reg := prometheus.NewRegistry()
				eng := f.engine(f.stream, p, inbox.WithGroupSize(10), inbox.WithRegisterer(reg))
				f.lead(eng)
				f.enqueue(f.stream, map[int64]string{1: "a;K", 2: "garbage", 3: "c;K"})
				// The batch ends at the undecodable message; the next
				// starts after it.
				f.drain(eng)
				f.wantStatus(map[int64]inbox.Status{1: inbox.Succeeded, 2: inbox.Dead, 3: inbox.Succeeded})
				if got := p.seen(); len(got) != 2 || !slices.Equal(got[0], []string{"a;K", "c;K"}) || !slices.Equal(got[1], []string{"c;K"}) {
					t.Fatalf("Prepare saw %v; want the decoded messages of each batch", got)
				}
				want := 2 // the two batches' rows are kept
				if fail != "" {
					want = 0 // rolled back with the failed Prepare's savepoint
				}
				if n := f.count("SELECT COUNT(*) FROM parent"); n != want {
					t.Fatalf("%d rows written by Prepare, want %d", n, want)
				}
				if got := f.bizIDs(f.stream); !slices.Equal(got, []int64{1, 3}) {
					t.Fatalf("business rows %v", got)
				}
				if n := testkit.MetricValue(t, reg, "msgx_inbox_prepare_failures_total"); n != float64(2-want) {
					t.Fatalf("msgx_inbox_prepare_failures_total = %v, want %d", n, 2-want)
				}
			})
		})
	}
}
