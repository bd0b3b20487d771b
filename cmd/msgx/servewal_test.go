package main

import (
	"strings"
	"testing"

	"github.com/msgx/msgx/store/storetest"
)

// serve --check with outbox.mode wal connects to the store and says whether
// the server and the role have what the wal mode needs.
func TestServeCheckWAL(t *testing.T) {
	_, dsn := storetest.NewSchema(t)
	t.Setenv("MSGX_STORE_DSN", dsn)
	t.Setenv("MSGX_OUTBOX_MODE", "wal")
	out := run(t, "serve", "--check")
	if !strings.Contains(out, "outbox.mode") || !strings.Contains(out, "outbox.mode wal: the server and the role have what the wal mode needs") {
		t.Fatalf("serve --check printed:\n%s", out)
	}
}
