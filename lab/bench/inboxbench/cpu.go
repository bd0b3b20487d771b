package inboxbench

import (
	"context"
	"fmt"
	"time"

	"github.com/msgx/msgx/lab/bench"
	"github.com/msgx/msgx/store"
)

// cpuProbe measures the CPU time the benchmark process and its PostgreSQL
// backends (found by application_name) spend, which says more than wall time
// on a machine shared with other work. It needs the server on this machine
// and /proc; where that is not so it reports nothing of the backends.
type cpuProbe struct {
	db      *store.DB
	app     string
	self    time.Duration
	backend map[int]time.Duration // at the start; a backend opened later counts from zero
	ok      bool
}

func startCPU(ctx context.Context, db *store.DB, app string) *cpuProbe {
	p := &cpuProbe{db: db, app: app, self: bench.ProcessCPU()}
	var err error
	p.backend, err = bench.BackendCPU(ctx, db, app)
	p.ok = err == nil
	return p
}

// stop returns extra RESULT fields: CPU microseconds per message.
func (p *cpuProbe) stop(ctx context.Context, n int) [][2]string {
	self := bench.ProcessCPU() - p.self
	out := [][2]string{{"go_cpu_us_per_msg", fmt.Sprintf("%.0f", float64(self.Microseconds())/float64(n))}}
	if !p.ok {
		return out
	}
	now, err := bench.BackendCPU(ctx, p.db, p.app)
	if err != nil {
		return out
	}
	var pg time.Duration
	for pid, cpu := range now {
		pg += cpu - p.backend[pid]
	}
	return append(out, [2]string{"pg_cpu_us_per_msg", fmt.Sprintf("%.0f", float64(pg.Microseconds())/float64(n))})
}
