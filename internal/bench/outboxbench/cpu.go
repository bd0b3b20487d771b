package outboxbench

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/msgx/msgx/store"
)

// The benchmark also reports CPU time per event, of this process and of the
// database backends serving the relays. On a shared machine wall-clock rates
// move with the neighbours' load; CPU time per event moves much less, which
// makes it the better guide when comparing changes.

// processCPU returns the CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// backendCPU sums the CPU time of the database backends whose
// application_name is app, read from /proc (only when the server runs on
// this machine; ok is false otherwise).
func backendCPU(ctx context.Context, db *store.DB, app string) (cpu time.Duration, ok bool) {
	rows, err := db.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = $1", app)
	if err != nil {
		return 0, false
	}
	defer rows.Close()
	tick := 100 // USER_HZ on Linux
	for rows.Next() {
		var pid int
		if rows.Scan(&pid) != nil {
			return 0, false
		}
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return 0, false
		}
		// Fields after the command name (which ends with ')'): utime and
		// stime are fields 14 and 15 of the whole line.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 13 {
			return 0, false
		}
		u, _ := strconv.Atoi(f[11])
		st, _ := strconv.Atoi(f[12])
		cpu += time.Duration(u+st) * time.Second / time.Duration(tick)
	}
	return cpu, rows.Err() == nil
}
