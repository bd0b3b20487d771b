package outboxbench

import (
	"context"
	"time"

	"github.com/msgx/msgx/lab/bench"
	"github.com/msgx/msgx/store"
)

// backendCPU is the CPU time of the database backends whose
// application_name is app, together; ok is false where it cannot be read
// (the server is not on this machine).
func backendCPU(ctx context.Context, db *store.DB, app string) (cpu time.Duration, ok bool) {
	byPID, err := bench.BackendCPU(ctx, db, app)
	for _, c := range byPID {
		cpu += c
	}
	return cpu, err == nil
}
