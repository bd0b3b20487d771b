package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/msgx/msgx/broker/brokertest"
	"github.com/msgx/msgx/source/mailbox"
	"github.com/msgx/msgx/store/storetest"
)

// TestServeCheckConnect: serve --check --connect reaches the store, the
// MySQL mailbox and the brokers of a configuration and says ok for each;
// a broker that refuses connections and a mailbox table that does not exist
// are named as FAILED, their passwords hidden, and the command fails.
func TestServeCheckConnect(t *testing.T) {
	ctx := context.Background()
	table := storetest.UniqueName("t_connect_")
	box, err := mailbox.OpenMySQL(ctx, storetest.MySQLDSN(), mailbox.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	if err := box.Create(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = box.Drop(context.Background()); _ = box.Close() })
	_, pg := storetest.NewSchema(t)
	conf := func(mailboxTable, rabbitURL string) string {
		path := filepath.Join(t.TempDir(), "msgx.yaml")
		body := fmt.Sprintf(`profile: embedded
store: {dsn: %q}
brokers:
  rabbit: {kind: rabbitmq, url: %q}
  local: {kind: mem}
mailboxes:
  legacy: {kind: mysql, dsn: %q, table: %s, start: from-beginning}
streams:
  sis: {processor: sis, mailbox: legacy}
relay:
  targets:
    "kafka:msg": {broker: rabbit, lane: per-key}
    "kafka:ref": {broker: local, lane: per-key}
    "kafka:schd": {broker: local, lane: compacted}
`, pg, rabbitURL, storetest.MySQLDSN(), mailboxTable)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}

	out := run(t, "serve", "--check", "--connect", "--config", conf(table, "amqp://guest:guest@127.0.0.1:5672/"))
	for _, want := range []string{"store", "mailbox legacy", "broker rabbit", "broker local"} {
		if !strings.Contains(out, "  "+want) || strings.Contains(out, "FAILED") {
			t.Fatalf("--connect with everything reachable:\n%s", out)
		}
	}

	refused := fmt.Sprintf("amqp://guest:secretpw@127.0.0.1:%d/", brokertest.FreePort(t))
	out, err = execute("serve", "--check", "--connect", "--config", conf(table+"_missing", refused))
	if err == nil || !strings.Contains(err.Error(), "2 of the configuration's databases and brokers cannot be reached") {
		t.Fatalf("--connect with a broker down and a table missing: %v\n%s", err, out)
	}
	for _, want := range []string{"mailbox legacy", "broker rabbit"} {
		if !strings.Contains(out, "  "+want) || !strings.Contains(out[strings.Index(out, "  "+want):], "FAILED") {
			t.Errorf("%s not reported as FAILED:\n%s", want, out)
		}
	}
	if strings.Contains(out, "secretpw") {
		t.Errorf("the broker's password was printed:\n%s", out)
	}
	if _, err := execute("serve", "--connect"); err == nil {
		t.Error("--connect without --check was accepted")
	}
}
