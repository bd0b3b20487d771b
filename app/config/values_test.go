package config

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/outbox"
)

// TestValuesShowDefaultsAndHideSecrets: serve --check's list has the
// components' own defaults for what the file leaves out, and no secret.
func TestValuesShowDefaultsAndHideSecrets(t *testing.T) {
	cfg, err := load(t, `
store: {dsn: "postgres://msgx:pg-secret@db:5432/msgx?sslmode=require"}
admin: {listen: "127.0.0.1:0", read-token: "read-token-secret-0123", operator-token: "operator-secret-01234"}
brokers: {main: {kind: mem}}
mailboxes: {shared: {kind: mysql, dsn: "msgx:my-secret@tcp(db:3306)/legacy"}}
streams: {sis: {processor: p, mailbox: shared}}
relay: {targets: {"kafka:msg": {broker: main}}}
`)
	if err != nil {
		t.Fatal(err)
	}
	values := Values(cfg)
	all := strings.Join(values, "\n")
	for _, secret := range []string{"pg-secret", "read-token-secret", "operator-secret", "my-secret"} {
		if strings.Contains(all, secret) {
			t.Errorf("Values shows the secret %q:\n%s", secret, all)
		}
	}
	retry := outbox.DefaultRetry()
	for _, want := range []string{
		"store.dsn = postgres://msgx:" + Redacted + "@db:5432/msgx?sslmode=require",
		"mailboxes.shared.dsn = msgx:" + Redacted + "@tcp(db:3306)/legacy",
		"admin.read-token = " + Redacted,
		fmt.Sprintf("streams.sis.group-size = %d", inbox.DefaultGroupSize),
		fmt.Sprintf("streams.sis.max-attempts = %d", inbox.DefaultMaxAttempts),
		"streams.sis.backoff.initial = " + inbox.DefaultBackoff().Initial.String(),
		"streams.sis.lease = " + inbox.DefaultLease.String(),
		fmt.Sprintf("relay.max-attempts = %d", retry.MaxAttempts),
		"relay.backoff.max = " + retry.Max.String(),
		"relay.lease = " + outbox.DefaultLease.String(),
		fmt.Sprintf("relay.targets.kafka:msg.batch = %d", outbox.DefaultBatch),
		fmt.Sprintf("relay.targets.kafka:msg.workers = %d", outbox.DefaultWorkers),
	} {
		if !slices.Contains(values, want) {
			t.Errorf("Values lacks %q:\n%s", want, all)
		}
	}
	if len(values) != len(Keys(cfg)) {
		t.Errorf("Values has %d lines, Keys %d", len(values), len(Keys(cfg)))
	}
}

func TestRedactDSN(t *testing.T) {
	for in, want := range map[string]string{
		"sqlite:msgx.db":                    "sqlite:msgx.db",
		"postgres://u@h/db":                 "postgres://u@h/db",
		"postgres://u:p@h/db":               "postgres://u:" + Redacted + "@h/db",
		"host=h user=u password=p dbname=d": "host=h user=u password=" + Redacted + " dbname=d",
		"host=h password='a b' dbname=d":    "host=h password=" + Redacted + " dbname=d",
		"u:p@tcp(h:3306)/db?parseTime=true": "u:" + Redacted + "@tcp(h:3306)/db?parseTime=true",
		"u@tcp(h:3306)/db":                  "u@tcp(h:3306)/db",
		"postgres://u:p@[bad":               Redacted,
	} {
		if got := redactDSN(in); got != want {
			t.Errorf("redactDSN(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRedactByKeyName(t *testing.T) {
	for path, secret := range map[string]bool{
		"admin.read-token":             true,
		"admin.tokens.ci.secret":       true,
		"brokers.main.sasl.password":   true,
		"brokers.main.nkey-seed":       true,
		"brokers.main.seeds":           false,
		"brokers.main.tls.key-file":    false,
		"streams.sis.max-attempts":     false,
		"tracing.headers.token-header": true,
	} {
		if got := redact(path, "v") == Redacted; got != secret {
			t.Errorf("redact(%s): redacted %v, want %v", path, got, secret)
		}
	}
}

// TestDocumentedDefaultsAreTheComponents: the defaults the reference in
// docs/operations.md gives for the streams' and the relay's keys are the
// ones a configuration gets, which are the inbox's and the outbox's own.
func TestDocumentedDefaultsAreTheComponents(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := load(t, `
store: {dsn: "sqlite:msgx.db"}
brokers: {b: {kind: mem}}
mailboxes: {m: {kind: mysql, dsn: "u@tcp(h:3306)/db"}}
streams: {NAME: {processor: p, mailbox: m}}
relay: {targets: {TARGET: {broker: b}}}
`)
	if err != nil {
		t.Fatal(err)
	}
	effective := map[string]string{}
	for _, v := range Values(cfg) {
		k, val, _ := strings.Cut(v, " = ")
		effective[k] = val
	}
	checked := 0
	for _, section := range []struct{ heading, prefix string }{{"### mailboxes.NAME\n", "mailboxes.m."}, {"### streams.NAME\n", "streams.NAME."}, {"### relay\n", ""}} {
		for _, row := range documentedDefaults(t, string(doc), section.heading) {
			key := section.prefix + row[0]
			got, ok := effective[key]
			if !ok {
				t.Errorf("docs/operations.md documents a default of %s, which is no key", key)
				continue
			}
			checked++
			if !sameValue(row[1], got) {
				t.Errorf("docs/operations.md says %s defaults to %s; it is %s", key, row[1], got)
			}
		}
	}
	if checked < 15 {
		t.Errorf("only %d documented defaults found: has the reference's table format changed?", checked)
	}
}

// documentedDefaults reads the table under heading: the rows whose key and
// default cells are code (`key` / `key2` | `v` / `v2`), as key, default
// pairs. A second key may be written from its last dot (`.max`).
func documentedDefaults(t *testing.T, doc, heading string) [][2]string {
	t.Helper()
	i := strings.Index(doc, heading)
	if i < 0 {
		t.Fatalf("docs/operations.md has no %q", strings.TrimSpace(heading))
	}
	section := doc[i+len(heading):]
	if end := strings.Index(section, "\n#"); end >= 0 {
		section = section[:end]
	}
	code := regexp.MustCompile("`([^`]*)`")
	var out [][2]string
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 {
			continue
		}
		keys, values := code.FindAllStringSubmatch(cells[1], -1), code.FindAllStringSubmatch(strings.Split(cells[2], "(")[0], -1)
		if len(keys) == 0 || len(keys) != len(values) {
			continue
		}
		prev := ""
		for j := range keys {
			key := keys[j][1]
			if strings.HasPrefix(key, ".") {
				key = prev[:strings.LastIndex(prev, ".")] + key
			}
			prev = key
			out = append(out, [2]string{key, values[j][1]})
		}
	}
	return out
}

// sameValue compares a documented value with an effective one: durations
// as durations (60s is 1m0s), anything else as written.
func sameValue(doc, got string) bool {
	if d, err := time.ParseDuration(doc); err == nil {
		g, err := time.ParseDuration(got)
		return err == nil && d == g
	}
	return doc == got
}
