package inboxbench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/msgx/msgx/store"
)

// cpuProbe measures the CPU time the benchmark process and its PostgreSQL
// backends (found by application_name) spend, which says more than wall time
// on a machine shared with other work. It needs the server on this machine
// and /proc; where that is not so it reports nothing.
type cpuProbe struct {
	db      *store.DB
	app     string
	self    time.Duration
	backend map[int]int64
	ok      bool
}

func startCPU(ctx context.Context, db *store.DB, app string) *cpuProbe {
	p := &cpuProbe{db: db, app: app, self: selfCPU(), backend: map[int]int64{}}
	pids, err := p.pids(ctx)
	if err != nil {
		return p
	}
	p.ok = true
	for _, pid := range pids {
		t, err := procTicks(pid)
		if err != nil {
			p.ok = false
			return p
		}
		p.backend[pid] = t
	}
	return p
}

// stop returns extra RESULT fields: CPU microseconds per message.
func (p *cpuProbe) stop(ctx context.Context, n int) [][2]string {
	self := selfCPU() - p.self
	out := [][2]string{{"go_cpu_us_per_msg", fmt.Sprintf("%.0f", float64(self.Microseconds())/float64(n))}}
	if !p.ok {
		return out
	}
	pids, err := p.pids(ctx)
	if err != nil {
		return out
	}
	var ticks int64
	for _, pid := range pids {
		t, err := procTicks(pid)
		if err != nil {
			return out
		}
		ticks += t - p.backend[pid]
	}
	// Linux reports in clock ticks of 10 ms (USER_HZ = 100).
	pg := time.Duration(ticks) * 10 * time.Millisecond
	return append(out, [2]string{"pg_cpu_us_per_msg", fmt.Sprintf("%.0f", float64(pg.Microseconds())/float64(n))})
}

func (p *cpuProbe) pids(ctx context.Context) ([]int, error) {
	rows, err := p.db.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = $1", p.app)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			return nil, err
		}
		out = append(out, pid)
	}
	return out, rows.Err()
}

func procTicks(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return 0, fmt.Errorf("unexpected /proc stat format")
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 13 {
		return 0, fmt.Errorf("unexpected /proc stat format")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("unexpected /proc stat format")
	}
	return utime + stime, nil
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
