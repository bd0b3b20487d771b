package console

import (
	"strings"
	"testing"

	"github.com/msgx/msgx/admin"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/pipeline/sis"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// The overview shows the WAL relay's slot: who streams from it, its
// position, lag and retained WAL, and an invalidated slot loudly.
func TestOverviewShowsTheWALSlot(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(sis.Schema(), admin.Schema()))
	st := outbox.WALStatus{Slot: "msgx_outbox", Active: true, ActivePID: 4242, Confirmed: "0/16B3748", LagBytes: 2048, RetainedBytes: 1 << 20}
	f := consoleOver(t, db, admin.Config{Targets: []string{"kafka:msg"}, ReadToken: readTok, Hosts: []string{"example.com"},
		WAL: func() outbox.WALStatus { return st }})
	r := f.do(t, "GET", "/console/", f.login(t, readTok), nil)
	for _, want := range []string{"<h2>WAL relay</h2>", "<b>msgx_outbox</b>", "another instance (backend 4242)", "0/16B3748",
		`<td class="num">2048</td><td class="num">1048576</td>`, "streaming"} {
		if !strings.Contains(r.body, want) {
			t.Errorf("the overview lacks %q:\n%s", want, r.body)
		}
	}
	st.Invalidated, st.Active = true, false
	r = f.do(t, "GET", "/console/", f.login(t, readTok), nil)
	if !strings.Contains(r.body, `<span class="bad">invalidated</span>: events were lost with its WAL`) {
		t.Errorf("the overview does not say the slot was invalidated:\n%s", r.body)
	}
}
