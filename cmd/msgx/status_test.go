package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

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
	if !strings.Contains(out.String(), "sis: mailbox unreadable for 1m35s: Error 1146: Table 'legacy.cminmsgs' doesn't exist") {
		t.Errorf("status output:\n%s", out.String())
	}
	if strings.Contains(out.String(), "other: mailbox") {
		t.Errorf("a line for a readable mailbox:\n%s", out.String())
	}
}
