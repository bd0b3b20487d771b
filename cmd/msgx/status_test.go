package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/admin"
)

// msgx status prints a line for a stream whose mailbox is unreadable, with
// how long and the error; none for a stream that reads.
func TestStatusShowsAnUnreadableMailbox(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(admin.Status{Streams: []admin.StreamStatus{
			{Stream: "sis", MailboxUnreadable: 95, MailboxError: "Error 1146: Table 'legacy.cminmsgs' doesn't exist"},
			{Stream: "other"},
		}})
	}))
	defer srv.Close()
	var out bytes.Buffer
	root := newRoot()
	root.SetOut(&out)
	root.SetErr(io.Discard)
	root.SetArgs([]string{"status", "--admin", srv.URL, "--token", "t"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	sis, other, _ := strings.Cut(out.String(), "STREAM other")
	if !strings.Contains(sis, "unreadable for 1 min: Error 1146: Table 'legacy.cminmsgs' doesn't exist") {
		t.Errorf("status output:\n%s", out.String())
	}
	if strings.Contains(other, "unreadable") {
		t.Errorf("a line for a readable mailbox:\n%s", out.String())
	}
}

// The status an operator reads: who holds each stream's lease (by instance
// id), the head's class and reason said once, each relay target's state,
// and an age beside every absolute time.
func TestPrintStatus(t *testing.T) {
	now := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { v := now.Add(d); return &v }
	st := admin.Status{Time: now,
		Streams: []admin.StreamStatus{{
			Stream: "sis", Leader: true, LeaseHolder: "msgx-a", LeaseOwner: "msgx-a/0badcafe", LeaseExpires: at(25 * time.Second),
			HeadID: 1234, HeadStatus: "FAILED", HeadReceived: at(-4*time.Minute - 10*time.Second), HeadAttempts: 3, HeadBlocked: 200,
			HeadClass: "INFRA", HeadReason: "INFRA: database unavailable", Backlog: 12, Failed: 1, Dead: 2,
			LastSuccess: at(-12 * time.Second), Watermark: 5678,
		}, {
			Stream: "other", LeaseHolder: "msgx-b", LeaseExpires: at(-90 * time.Second),
			HeadID: 7, HeadStatus: "DEAD", HeadClass: "MALFORMED", HeadReason: "no body",
		}},
		Targets: []admin.TargetStatus{{Target: "kafka:msg", Relayed: true, Pending: 3}, {Target: "kafka:ref", Pending: 40},
			{Target: "kafka:schd", Relayed: true, Pending: 9, Paused: true, PausedSince: at(-3 * time.Minute),
				LastError: "dial tcp 127.0.0.1:9092: connection refused", LastErrorAt: at(-10 * time.Second)}},
	}
	var b bytes.Buffer
	if err := printStatus(&b, st); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"held by msgx-a (the instance answering), until 2026-12-06T03:00:25Z (in 25 s)",
		"1234 FAILED, received 2026-12-06T02:55:50Z (4 min ago), 3 attempts, retried for 3 min",
		"INFRA: database unavailable\n",
		"last success  2026-12-06T02:59:48Z (12 s ago), by the instance answering",
		"last held by msgx-b, expired 2026-12-06T02:58:30Z (1 min ago): nothing pumps the stream",
		"MALFORMED: no body\n",
		"kafka:ref   NO RELAY (relay.targets lacks it)  40",
		"since 2026-12-06T02:57:00Z (3 min ago) (broker unavailable)  2026-12-06T02:59:50Z (10 s ago) dial tcp 127.0.0.1:9092: connection refused",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "INFRA: INFRA:") {
		t.Errorf("the class is said twice:\n%s", out)
	}
}
