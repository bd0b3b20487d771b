package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// serve --check validates the sample production configuration and names
// every unsafe value at once.
func TestServeCheck(t *testing.T) {
	t.Setenv("MSGX_ADMIN_OPERATOR_TOKEN", "cK4pN9vB2cX7zL5qJ1hG8fD3sA6mW0rTy")
	if out := run(t, "serve", "--check", "--config", "../../deploy/msgx.production.yaml"); !strings.Contains(out, "configuration valid (profile production)") ||
		!strings.Contains(out, "relay.targets.kafka:msg.lane") {
		t.Fatalf("serve --check printed:\n%s", out)
	}
	t.Setenv("MSGX_STORE_DSN", "sqlite:prod.db")
	t.Setenv("MSGX_BROKERS_MAIN_ACKS", "leader")
	t.Setenv("MSGX_MAILBOXES_SHARED_START", "")
	root := newRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs([]string{"serve", "--check", "--config", "../../deploy/msgx.production.yaml"})
	err := root.ExecuteContext(context.Background())
	if err == nil {
		t.Fatal("an unsafe production configuration was accepted")
	}
	for _, want := range []string{"3 problems", "store.dsn: SQLite is refused", "brokers.main.acks: the production profile refuses Kafka producers without acks=all",
		"mailboxes.shared.start: the production profile wants an explicit start position"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal lacks %q:\n%v", want, err)
		}
	}
}

// serve --check refuses a key the broker's kind does not have, naming the
// key, its line and the kind's keys.
func TestServeCheckRefusesAKeyOfAnotherKind(t *testing.T) {
	path := filepath.Join(t.TempDir(), "msgx.yaml")
	yml := "store: {dsn: \"sqlite:a.db\"}\nbrokers:\n  r:\n    kind: rabbitmq\n    url: amqps://h/\n    seeds: [\"h:9092\"]\n"
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := execute("serve", "--check", "--config", path)
	want := "brokers.r.seeds: line 6: not a key of a rabbitmq broker (its keys here: auth, tls, url)"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("serve --check: %v\nwant %q", err, want)
	}
}
