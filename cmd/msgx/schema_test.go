package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"

	"github.com/msgx/msgx/app/config"
)

// fullConfig has every section, with an entry in every map and a broker
// of every kind this build links.
const fullConfig = `profile: embedded
instance-id: i1
log: {level: info, format: text}
store: {dsn: "sqlite:x.db", max-conns: 1, migrate: true, start-timeout: 1m}
admin:
  listen: 127.0.0.1:0
  tokens: {ops: {scope: operator, secret: "a8Kq2ZpL0vR7xN4cT9bW1mY6hJ3sD5fG"}}
  limits: {read-timeout: 1m}
ingress:
  listen: 127.0.0.1:0
  stream: sis
  senders: {aodb: {addresses: [127.0.0.1], sndr: [AODB]}}
brokers:
  k: {kind: kafka, seeds: ["127.0.0.1:9092"]}
  r: {kind: rabbitmq, url: "amqp://guest:guest@127.0.0.1:5672/"}
  m: {kind: mqtt, url: "tcp://127.0.0.1:1883"}
  n: {kind: nats, url: "nats://127.0.0.1:4222"}
  p: {kind: pulsar, url: "pulsar://127.0.0.1:6650"}
  local: {kind: mem}
mailboxes:
  box: {kind: store, table: cminmsgs, start: from-beginning}
streams:
  sis:
    processor: sis
    mailbox: box
    options: {airport: ZGGG}
    sources: {rabbit: {kind: broker, broker: r, topic: sis.in, group: msgx}}
pipelines:
  sishistory: {options: {retention: 336h}}
relay:
  targets:
    "kafka:msg": {broker: local, lane: per-key}
    "kafka:ref": {broker: local, lane: per-key}
    "kafka:schd": {broker: local, lane: compacted}
`

func compiledSchema(t *testing.T, b []byte) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(config.SchemaID, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(config.SchemaID)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// asJSON is a YAML document as the JSON value a schema validates.
func asJSON(t *testing.T, yml []byte) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal(yml, &v); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	out, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestConfigSchema: deploy/msgx.schema.json is what `msgx config schema`
// prints (MSGX_UPDATE_DOCS=1 rewrites it); its keys are the keys serve
// --check knows, no more and no fewer, a broker's those of its kind; every
// sample declares it and passes it; a misspelt key or a key of another
// broker kind does not.
func TestConfigSchema(t *testing.T) {
	want, err := config.Schema(adapters())
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join("..", "..", "deploy", "msgx.schema.json")
	if os.Getenv("MSGX_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(file, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := os.ReadFile(file); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("deploy/msgx.schema.json is not what msgx config schema prints (MSGX_UPDATE_DOCS=1 go test ./cmd/msgx -run TestConfigSchema): %v", err)
	}
	if out := run(t, "config", "schema"); out != string(want) {
		t.Fatal("msgx config schema printed another schema")
	}
	sch := compiledSchema(t, want)

	dir := t.TempDir()
	path := filepath.Join(dir, "full.yaml")
	if err := os.WriteFile(path, []byte(fullConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, nil, adapters())
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Validate(asJSON(t, []byte(fullConfig))); err != nil {
		t.Fatalf("the full configuration fails the schema: %v", err)
	}
	keys := config.Keys(cfg)
	var doc map[string]any
	if err := json.Unmarshal(want, &doc); err != nil {
		t.Fatal(err)
	}
	kindOf := func(name string) string { return cfg.Brokers[name].Kind }
	leaves := schemaLeaves(doc, "", keys, kindOf)
	slices.Sort(leaves)
	t.Logf("%d keys, %d schema leaves", len(keys), len(leaves))
	for _, k := range keys {
		if _, ok := slices.BinarySearch(leaves, k); !ok {
			t.Errorf("serve --check knows %s, the schema does not", k)
		}
	}
	for _, l := range leaves {
		if !slices.Contains(keys, l) {
			t.Errorf("the schema has %s, serve --check does not know it", l)
		}
	}

	samples, err := filepath.Glob(filepath.Join("..", "..", "deploy", "msgx.*.yaml"))
	if err != nil || len(samples) == 0 {
		t.Fatalf("no samples: %v", err)
	}
	for _, s := range samples {
		b, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte("# yaml-language-server: $schema=msgx.schema.json\n")) {
			t.Errorf("%s does not start with the yaml-language-server schema line", s)
		}
		if err := sch.Validate(asJSON(t, b)); err != nil {
			t.Errorf("%s fails the schema: %v", s, err)
		}
	}

	for name, bad := range map[string]string{
		"a misspelt key":              strings.Replace(fullConfig, "max-conns: 1", "max-con: 1", 1),
		"a key of another kind":       strings.Replace(fullConfig, `{kind: rabbitmq, url:`, `{kind: rabbitmq, seeds: [a], url:`, 1),
		"a duration that is not one":  strings.Replace(fullConfig, "start-timeout: 1m", "start-timeout: soon", 1),
		"a broker of no kind we have": strings.Replace(fullConfig, "{kind: mem}", "{kind: zeromq}", 1),
	} {
		if err := sch.Validate(asJSON(t, []byte(bad))); err == nil {
			t.Errorf("%s passes the schema", name)
		}
	}
}

// schemaLeaves lists the key paths of the schema's leaves below prefix,
// with the names of the maps' entries those in keys have and, for a broker
// block, the keys of its kind.
func schemaLeaves(s map[string]any, prefix string, keys []string, kindOf func(string) string) []string {
	join := func(a, b string) string {
		if a == "" {
			return b
		}
		return a + "." + b
	}
	if props, ok := s["properties"].(map[string]any); ok && s["type"] == "object" || s["allOf"] != nil {
		var out []string
		for k, v := range props {
			out = append(out, schemaLeaves(v.(map[string]any), join(prefix, k), keys, kindOf)...)
		}
		if cases, ok := s["allOf"].([]any); ok { // a broker block: its kind's keys
			name := prefix[strings.LastIndex(prefix, ".")+1:]
			for _, c := range cases {
				c := c.(map[string]any)
				kind := c["if"].(map[string]any)["properties"].(map[string]any)["kind"].(map[string]any)["const"]
				if kind == kindOf(name) {
					out = append(out, schemaLeaves(map[string]any{"type": "object", "properties": c["then"].(map[string]any)["properties"]}, prefix, keys, kindOf)...)
				}
			}
		}
		return out
	}
	if entry, ok := s["additionalProperties"].(map[string]any); ok && s["type"] == "object" {
		var out []string
		seen := map[string]bool{}
		for _, k := range keys {
			rest, ok := strings.CutPrefix(k, prefix+".")
			if !ok {
				continue
			}
			name, _, _ := strings.Cut(rest, ".")
			if !seen[name] {
				seen[name] = true
				out = append(out, schemaLeaves(entry, join(prefix, name), keys, kindOf)...)
			}
		}
		return out
	}
	return []string{prefix}
}
