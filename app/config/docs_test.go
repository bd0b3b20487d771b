package config

import (
	"os"
	"strings"
	"testing"
)

// documents reports whether doc describes key: in full, or by its last part
// (or last two) in a section's table.
func documents(doc, key string) bool {
	parts := strings.Split(key, ".")
	leaf := parts[len(parts)-1]
	return strings.Contains(doc, "`"+key+"`") || strings.Contains(doc, "`"+leaf+"`") ||
		strings.Contains(doc, "`"+strings.Join(parts[max(0, len(parts)-2):], ".")+"`") ||
		strings.Contains(doc, "."+leaf+"`")
}

// Every key of each broker adapter is in its page's configuration table
// (docs/adapters/KIND.md; mem has no keys beside kind).
func TestEveryAdapterKeyIsDocumented(t *testing.T) {
	reg := adapters()
	for _, kind := range reg.Kinds() {
		settings, _ := reg.New(kind)
		cfg := &Config{Brokers: map[string]Broker{"NAME": {Kind: kind, Settings: settings}}}
		var keys []string
		for _, key := range Keys(cfg) {
			if rest, ok := strings.CutPrefix(key, "brokers.NAME."); ok && rest != "kind" {
				keys = append(keys, rest)
			}
		}
		if len(keys) == 0 {
			continue
		}
		doc, err := os.ReadFile("../../docs/adapters/" + kind + ".md")
		if err != nil {
			t.Fatal(err)
		}
		_, table, _ := strings.Cut(string(doc), "## Configuration")
		for _, key := range keys {
			if !documents(table, key) {
				t.Errorf("docs/adapters/%s.md's configuration table does not describe %s", kind, key)
			}
		}
	}
}

// Every key of the configuration is in the reference of docs/operations.md.
func TestEveryKeyIsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &Config{
		Brokers:   map[string]Broker{"NAME": {}},
		Mailboxes: map[string]Mailbox{"NAME": {}},
		Streams:   map[string]Stream{"NAME": {Sources: map[string]Source{"SOURCE": {}}}},
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
