package outbox_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
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
	db := storetest.NewPostgres(t, store.WithMigrate(outbox.Schema()))
	r := newRelay(t, db, clock.NewFake(t0), outbox.Target("p", &sink{}, outbox.PerKey))
	stmts := outbox.RelayStatements(t)
	if len(stmts) < 15 {
		t.Fatalf("found %d relay statements", len(stmts))
	}
	storetest.CheckPlans(t, outbox.RelayPool(r), stmts, regexp.MustCompile(`^msgx_outbox(_sent|_key_state)?$`))
}

// The per-key claims ask, per head, whether a DEAD event of its key holds
// it: a probe of msgx_outbox_dead_key by target and key, whatever the plan
// was made on. Never a scan of the target's whole dead index matched to
// the key afterwards, which costs as much per head as the target has dead
// letters.
func TestDeadKeyProbeIsByKey(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(outbox.Schema()))
	r := newRelay(t, db, clock.NewFake(t0), outbox.Target("p", &sink{}, outbox.PerKey))
	all := outbox.RelayStatements(t)
	stmts := map[string]string{"ClaimHeads": all["ClaimHeads"], "SentAdvance": all["SentAdvance"]}
	probe := regexp.MustCompile(`Index (?:Only )?Scan using msgx_outbox_dead_key on msgx_outbox \w+[^\n]*\n\s*Index Cond: ([^\n]*)`)
	for name, plan := range storetest.GenericPlans(t, outbox.RelayPool(r), stmts) {
		if testing.Verbose() {
			t.Logf("%s:\n%s", name, plan)
		}
		m := probe.FindAllStringSubmatch(plan, -1)
		if len(m) != 1 {
			t.Errorf("%s: %d probes of msgx_outbox_dead_key, want 1:\n%s", name, len(m), plan)
			continue
		}
		if !strings.Contains(m[0][1], "partition_key =") {
			t.Errorf("%s probes msgx_outbox_dead_key without the key (%s):\n%s", name, m[0][1], plan)
		}
	}
}
