package config

import (
	"os"
	"strings"
	"testing"
)

// Every key of the configuration is in the reference of docs/operations.md.
func TestEveryKeyIsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &Config{
		Brokers:   map[string]Broker{"NAME": {}},
		Mailboxes: map[string]Mailbox{"NAME": {}},
		Streams:   map[string]Stream{"NAME": {}},
		Pipelines: map[string]Pipeline{"NAME": {}},
		Relay:     Relay{Targets: map[string]Target{"TARGET": {}}},
	}
	for _, key := range Keys(cfg) {
		parts := strings.Split(key, ".")
		leaf := parts[len(parts)-1]
		// Top-level and section keys are written in full, entry keys by
		// their last part (and backoff's by theirs) in the section's table.
		full := "`" + key + "`"
		short := "`" + leaf + "`"
		if !strings.Contains(string(doc), full) && !strings.Contains(string(doc), short) &&
			!strings.Contains(string(doc), "`"+strings.Join(parts[max(0, len(parts)-2):], ".")+"`") &&
			!strings.Contains(string(doc), "."+leaf+"`") {
			t.Errorf("docs/operations.md does not describe %s", key)
		}
	}
}
