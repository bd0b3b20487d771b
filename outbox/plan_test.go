package outbox_test

import (
	"regexp"
	"testing"

	"github.com/msgx/msgx/internal/clock"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store/storetest"
)

// The relay's statements keep their index and ctid paths in the plans its
// connections cache, even plans made while the outbox was empty, as it is
// when a relay starts on an idle outbox. On a table of a few pages a
// sequential scan looks cheaper than fetching rows by ctid, and a cached
// plan would go on reading the whole table on every claim once a backlog
// builds up. Nor is any statement compiled (JIT) first: a plan costed with
// the disabled sequential scan's penalty would be, every time it runs.
func TestRelayPlansKeepTheirIndexPathsOnAnEmptyTable(t *testing.T) {
	db := storetest.NewPostgres(t)
	r := newRelay(t, db, clock.NewFake(t0), outbox.Target("p", &sink{}, outbox.PerKey))
	stmts := outbox.RelayStatements(t)
	if len(stmts) < 15 {
		t.Fatalf("found %d relay statements", len(stmts))
	}
	storetest.CheckPlans(t, outbox.RelayPool(r), stmts, regexp.MustCompile(`^msgx_outbox(_sent|_key_state)?$`))
}
