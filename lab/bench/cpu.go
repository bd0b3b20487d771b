package bench

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/msgx/msgx/store"
)

// The database workloads also report CPU time per message, of the benchmark
// process and of the PostgreSQL backends serving it. On a shared machine
// wall-clock rates move with the neighbours' load; CPU time per message moves
// much less, which makes it the better guide when comparing changes.

// ProcessCPU returns the CPU time this process has used.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BackendCPU returns the CPU time used so far by each database backend whose
// application_name is app, by process id, read from /proc: it needs the
// server on this machine.
func BackendCPU(ctx context.Context, db *store.DB, app string) (map[int]time.Duration, error) {
	rows, err := db.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = $1", app)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int]time.Duration{}
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			return nil, err
		}
		cpu, err := procCPU(pid)
		if err != nil {
			return nil, err
		}
		out[pid] = cpu
	}
	return out, rows.Err()
}

var errProcStat = errors.New("bench: unexpected /proc stat format")

// procCPU is the user plus system time of a local process.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// Fields after the command name (which ends with ')'): utime and stime
	// are fields 14 and 15 of the whole line, in USER_HZ (100 on Linux).
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return 0, errProcStat
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 13 {
		return 0, errProcStat
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, errProcStat
	}
	return time.Duration(utime+stime) * time.Second / 100, nil
}
