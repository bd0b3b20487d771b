package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/pipeline/sis/traffic"
	"github.com/msgx/msgx/source/mailbox"
	"github.com/msgx/msgx/store"
)

// TestKilledInstanceResumesAtOnce kills the binary with SIGKILL while it
// holds the sis stream's lease (30 s, the default) and starts it again under
// the same instance id: the restarted process takes its lease back at once
// and processes the rows written meanwhile within a few seconds of being up,
// not after the dead run's lease has expired.
func TestKilledInstanceResumesAtOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bin := buildMsgx(t)
	deps := newProdDeps(t, ctx)
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	env := append(deps.env(), "MSGX_INSTANCE_ID=resume-"+hex.EncodeToString(rnd[:]))
	db, err := store.Open(ctx, deps.pgDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	msgs, err := traffic.Ordered(time.Now().UnixNano() % 1_000_000_000)
	if err != nil {
		t.Fatal(err)
	}
	insert := func(ms [][]byte) {
		t.Helper()
		for _, m := range ms {
			if _, err := deps.mb.Insert(ctx, m, time.Now(), mailbox.Meta{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	finished := func(n int) func() bool {
		return func() bool {
			done := 0
			for _, r := range inboxRows(t, ctx, db, "sis") {
				if r.status == inbox.Succeeded || r.status == inbox.Skipped {
					done++
				}
			}
			return done >= n
		}
	}

	svc := startService(t, bin, env)
	insert(msgs[:5])
	testkit.Eventually(t, "the first rows processed", 60*time.Second, finished(5))
	h, ok, err := inbox.HolderOf(ctx, db, "sis")
	if err != nil || !ok || time.Until(h.Expires) < 10*time.Second {
		t.Fatalf("the lease before the kill: %+v %v %v (want one with most of its 30 s left)", h, ok, err)
	}
	if err := svc.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-svc.exited
	insert(msgs[5:10])

	svc = startService(t, bin, env)
	up := time.Now()
	testkit.Eventually(t, "the rows written during the restart processed", 5*time.Second, finished(10))
	t.Logf("pumping again %s after the restarted process was up (the dead run's lease had %s left at the kill)",
		time.Since(up).Round(10*time.Millisecond), time.Until(h.Expires).Round(time.Second))
	after, _, err := inbox.HolderOf(ctx, db, "sis")
	if err != nil || after.Instance != h.Instance || after.Owner == h.Owner {
		t.Errorf("the lease after the restart: %+v (before %+v) %v", after, h, err)
	}
	svc.logMu.Lock()
	logs := svc.logs.String()
	svc.logMu.Unlock()
	if strings.Contains(logs, "took the stream's lease over") {
		t.Errorf("the restarted process reported a twin:\n%s", logs)
	}
	svc.stop(t)
}
