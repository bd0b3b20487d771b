package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/broker/brokers"
	"github.com/msgx/msgx/broker/kafka"
	"github.com/msgx/msgx/broker/mem"
	"github.com/msgx/msgx/broker/mqtt"
	"github.com/msgx/msgx/broker/nats"
	"github.com/msgx/msgx/broker/pulsar"
	"github.com/msgx/msgx/broker/rabbitmq"
)

// adapters is every adapter, as the msgx command registers them.
func adapters() *brokers.Registry {
	return brokers.NewRegistry(kafka.Adapter(), rabbitmq.Adapter(), nats.Adapter(), mqtt.Adapter(), pulsar.Adapter(), mem.Adapter())
}

// kafkaOf is the Kafka settings of a broker.
func kafkaOf(t *testing.T, b Broker) *kafka.Config {
	t.Helper()
	k, ok := b.Settings.(*kafka.Config)
	if !ok {
		t.Fatalf("broker of kind %q has settings %T, not Kafka's", b.Kind, b.Settings)
	}
	return k
}

// token is random, as the production profile wants it.
const token = "Qm8sT4vX2nLp9wRk7bJc3yHf6dZg1aEuN5tV0oWx"

func load(t *testing.T, yml string, env ...string) (*Config, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "msgx.yaml")
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	return Load(path, env, adapters())
}

func problemsOf(t *testing.T, err error) []string {
	t.Helper()
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("want a configuration error, got %v", err)
	}
	return ce.Problems
}

func wantProblem(t *testing.T, err error, key, fragment string) {
	t.Helper()
	for _, p := range problemsOf(t, err) {
		if strings.HasPrefix(p, key+": ") && strings.Contains(p, fragment) {
			return
		}
	}
	t.Errorf("no problem %q containing %q in:\n%v", key, fragment, err)
}

func TestEmbeddedDefault(t *testing.T) {
	cfg, err := Load("", nil, adapters())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Profile != Embedded || cfg.Store.DSN != "sqlite:msgx.db" || cfg.Brokers["local"].Kind != mem.Kind || !cfg.Defaulted {
		t.Fatalf("embedded default: %+v", cfg)
	}
	if got := cfg.Relay.Targets["kafka:schd"]; got.Lane != "compacted" || got.Workers != 1 {
		t.Errorf("schd target: %+v", got)
	}
}

// deploy/msgx.embedded.yaml is the built-in default written out: loading it
// gives the configuration `msgx serve` runs with no file.
func TestEmbeddedSampleIsTheDefault(t *testing.T) {
	def, err := Load("", nil, adapters())
	if err != nil {
		t.Fatal(err)
	}
	file, err := Load("../../deploy/msgx.embedded.yaml", nil, adapters())
	if err != nil {
		t.Fatal(err)
	}
	file.Defaulted = def.Defaulted
	if !reflect.DeepEqual(def, file) {
		t.Errorf("deploy/msgx.embedded.yaml differs from EmbeddedDefault:\n default: %+v\n file:    %+v", def, file)
	}
}

func TestSampleFiles(t *testing.T) {
	emb, err := Load("../../deploy/msgx.embedded.yaml", nil, adapters())
	if err != nil {
		t.Fatalf("embedded sample: %v", err)
	}
	if emb.Defaulted {
		t.Error("a file is not the default")
	}
	// The production sample wants its tokens from the environment.
	_, err = Load("../../deploy/msgx.production.yaml", nil, adapters())
	wantProblem(t, err, "admin.listen", "without a token")
	prod, err := Load("../../deploy/msgx.production.yaml", []string{"MSGX_ADMIN_OPERATOR_TOKEN=" + token}, adapters())
	if err != nil {
		t.Fatalf("production sample: %v", err)
	}
	if prod.Mailboxes["shared"].Start != "from-now" || prod.Streams["sis"].HeadDeadline.D() != 10*time.Minute {
		t.Errorf("production sample: %+v", prod)
	}
}

func TestEnvironmentOverridesEveryKind(t *testing.T) {
	cfg, err := load(t, `
store: {dsn: "sqlite:a.db"}
brokers: {main: {kind: kafka, seeds: ["a:1"]}}
mailboxes: {shared: {kind: mysql, dsn: "x@tcp(h:3306)/db"}}
streams: {sis: {processor: p, mailbox: shared, options: {location: LED}}}
relay: {targets: {"kafka:msg": {broker: main}}}
`, "MSGX_STORE_DSN=postgres://u@h/db", "MSGX_BROKERS_MAIN_SEEDS=h1:9092, h2:9092",
		"MSGX_STREAMS_SIS_MAX_ATTEMPTS=7", "MSGX_STREAMS_SIS_HEAD_DEADLINE=2m",
		"MSGX_STREAMS_SIS_OPTIONS_LOCATION=SVO", "MSGX_MAILBOXES_SHARED_SHARED=false",
		"MSGX_RELAY_TARGETS_KAFKA_MSG_LANE=compacted", "MSGX_SHADOW=true", "UNRELATED=1")
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Streams["sis"]
	if cfg.Store.DSN != "postgres://u@h/db" || strings.Join(kafkaOf(t, cfg.Brokers["main"]).Seeds, ",") != "h1:9092,h2:9092" ||
		s.MaxAttempts != 7 || s.HeadDeadline.D() != 2*time.Minute || s.Options["location"] != "SVO" ||
		*cfg.Mailboxes["shared"].Shared || cfg.Relay.Targets["kafka:msg"].Lane != "compacted" || !cfg.Shadow {
		t.Fatalf("overrides not applied: %+v", cfg)
	}
	if got := EnvName("relay.targets.kafka:msg.flush-period"); got != "MSGX_RELAY_TARGETS_KAFKA_MSG_FLUSH_PERIOD" {
		t.Errorf("EnvName: %s", got)
	}
	keys := Keys(cfg)
	for _, k := range []string{"store.dsn", "streams.sis.options.location", "relay.targets.kafka:msg.lane", "admin.operator-token"} {
		found := false
		for _, have := range keys {
			found = found || have == k
		}
		if !found {
			t.Errorf("Keys lacks %s", k)
		}
	}
}

func TestEveryProblemAtOnce(t *testing.T) {
	_, err := load(t, `
profile: staging
log: {level: loud, format: xml}
store: {dsn: "mysql://x"}
admin: {listen: "nohost", read-token: short}
brokers:
  k: {kind: kafka, acks: most, seeds: ["nocolon"]}
  r: {kind: rabbitmq}
  z: {kind: zeromq}
mailboxes:
  m: {kind: mysql, table: "bad name;", start: "yesterday"}
streams:
  s: {mailbox: nope, group-size: 100, max-attempts: -1}
relay:
  lease: 10s
  targets: {"t": {broker: none, lane: sideways}}
ingress: {listen: ":1", stream: ghost}
`, "MSGX_STREAMS_S_HEAD_DEADLINE=soon", "MSGX_STREAMS_S_BACKFILL=maybe")
	for _, w := range [][2]string{
		{"profile", "not a profile"}, {"log.level", "loud"}, {"log.format", "xml"},
		{"store.dsn", "postgres://"}, {"admin.listen", "host:port"}, {"admin.read-token", "16 characters"},
		{"brokers.k.acks", "most"}, {"brokers.k.seeds", "nocolon"}, {"brokers.r.url", "missing"},
		{"brokers.z.kind", "zeromq"}, {"mailboxes.m.dsn", "missing"}, {"mailboxes.m.table", "bad name"},
		{"mailboxes.m.start", "yesterday"}, {"streams.s.processor", "missing"}, {"streams.s.mailbox", "nope"},
		{"streams.s.group-size", "1 to 64"}, {"streams.s.max-attempts", "at least 1"},
		{"streams.s.head-deadline (from MSGX_STREAMS_S_HEAD_DEADLINE)", "soon"},
		{"streams.s.backfill (from MSGX_STREAMS_S_BACKFILL)", "true or false"},
		{"relay.targets.t.broker", "none"}, {"relay.targets.t.lane", "sideways"}, {"relay.lease", "exceed"},
		{"ingress.stream", "ghost"},
	} {
		wantProblem(t, err, w[0], w[1])
	}
}

func TestUnknownKeyAndBadDuration(t *testing.T) {
	if _, err := load(t, "store: {dsn: sqlite:x, pool: 3}\n"); err == nil || !strings.Contains(err.Error(), "pool") {
		t.Errorf("unknown key: %v", err)
	}
	if _, err := load(t, "shutdown-timeout: forever\n"); err == nil || !strings.Contains(err.Error(), "not a duration") {
		t.Errorf("bad duration: %v", err)
	}
}

// production is a configuration the production profile accepts; each case
// below breaks one thing.
const production = `
profile: production
store: {dsn: "postgres://u@h/db"}
admin: {listen: "127.0.0.1:0", operator-token: "` + token + `"}
brokers: {main: {kind: kafka, seeds: ["k:9092"]}}
mailboxes: {shared: {kind: mysql, dsn: "u@tcp(h:3306)/db", start: "from-id:100"}}
streams: {sis: {processor: sis, mailbox: shared}}
relay: {targets: {"kafka:msg": {broker: main}}}
`

func TestProductionProfileRefusals(t *testing.T) {
	if _, err := load(t, production); err != nil {
		t.Fatalf("the safe production configuration is refused: %v", err)
	}
	for _, c := range []struct {
		name, key, fragment string
		env                 []string
	}{
		{"in-memory broker", "brokers.main.kind", "in-memory broker is refused", []string{"MSGX_BROKERS_MAIN_KIND=mem", "MSGX_BROKERS_MAIN_SEEDS=", "MSGX_BROKERS_MAIN_ACKS="}},
		{"sqlite", "store.dsn", "SQLite is refused", []string{"MSGX_STORE_DSN=sqlite:prod.db"}},
		{"acks", "brokers.main.acks", "without acks=all", []string{"MSGX_BROKERS_MAIN_ACKS=leader"}},
		{"idempotence", "brokers.main.idempotence", "without idempotence", []string{"MSGX_BROKERS_MAIN_IDEMPOTENCE=false"}},
		{"admin token", "admin.listen", "without a token", []string{"MSGX_ADMIN_OPERATOR_TOKEN="}},
		{"shared mailbox start", "mailboxes.shared.start", "explicit start position", []string{"MSGX_MAILBOXES_SHARED_START="}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := load(t, production, c.env...)
			wantProblem(t, err, c.key, c.fragment)
		})
	}
	// The embedded profile lets the same things through.
	if _, err := load(t, strings.Replace(production, "profile: production", "profile: embedded", 1),
		"MSGX_BROKERS_MAIN_ACKS=none", "MSGX_ADMIN_OPERATOR_TOKEN=", "MSGX_MAILBOXES_SHARED_START="); err != nil {
		t.Errorf("embedded profile: %v", err)
	}
}

func TestShadowRefusesIngress(t *testing.T) {
	_, err := load(t, production, "MSGX_SHADOW=true", "MSGX_INGRESS_LISTEN=127.0.0.1:0")
	wantProblem(t, err, "ingress.listen", "shadow mode")
}

func TestParseStart(t *testing.T) {
	for in, want := range map[string]StartPosition{
		"from-beginning": {Mode: "from-beginning"}, "from-now": {Mode: "from-now"}, "from-id:42": {Mode: "from-id", After: 42},
	} {
		if got, err := ParseStart(in); err != nil || got != want {
			t.Errorf("ParseStart(%q) = %+v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "from-id:", "from-id:-1", "now"} {
		if _, err := ParseStart(bad); err == nil {
			t.Errorf("ParseStart(%q) accepted", bad)
		}
	}
}

func TestBrokerSources(t *testing.T) {
	cfg, err := load(t, `
store: {dsn: "sqlite:a.db"}
brokers: {main: {kind: kafka, seeds: ["a:1"]}}
streams:
  sis:
    processor: sis
    sources:
      feed: {kind: broker, broker: main, topic: sis.in, group: msgx-sis}
`, "MSGX_STREAMS_SIS_SOURCES_FEED_TOPIC=sis.other")
	if err != nil {
		t.Fatal(err)
	}
	src := cfg.Streams["sis"].Sources["feed"]
	if src.Topic != "sis.other" || src.Group != "msgx-sis" || src.MaxBytes != 16<<20-1 {
		t.Errorf("source: %+v", src)
	}

	_, err = load(t, `
shadow: true
store: {dsn: "sqlite:a.db"}
brokers: {main: {kind: kafka, seeds: ["a:1"]}}
streams:
  a:
    processor: sis
    sources:
      nokind: {broker: main, topic: t, group: g}
      odd: {kind: http, broker: main, topic: t, group: g}
      empty: {kind: broker, max-bytes: -1}
      ghost: {kind: broker, broker: nowhere, topic: t, group: g}
      feed: {kind: broker, broker: main, topic: t, group: g}
  b:
    processor: sis
    sources:
      again: {kind: broker, broker: main, topic: t, group: g}
`)
	wantProblem(t, err, "streams.a.sources.nokind.kind", "missing (broker)")
	wantProblem(t, err, "streams.a.sources.odd.kind", `"http" is not a source kind`)
	wantProblem(t, err, "streams.a.sources.empty.broker", "missing")
	wantProblem(t, err, "streams.a.sources.empty.topic", "missing")
	wantProblem(t, err, "streams.a.sources.empty.group", "name it explicitly")
	wantProblem(t, err, "streams.a.sources.empty.max-bytes", "must be positive")
	wantProblem(t, err, "streams.a.sources.ghost.broker", `no broker named "nowhere" (brokers: main)`)
	wantProblem(t, err, "streams.a.sources.feed", "shadow mode takes no broker source")
	wantProblem(t, err, "streams.b.sources.again", "same broker, topic and group as streams.a.sources.feed")
}

func TestKafkaTLSAndSASLSettings(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, []byte("pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := load(t, `
store: {dsn: "sqlite:a.db"}
brokers:
  main:
    kind: kafka
    tls: {ca-file: `+ca+`}
    sasl: {mechanism: scram-sha-512, user: msgx}
`, "MSGX_BROKERS_MAIN_SASL_PASSWORD=from-env")
	if err != nil {
		t.Fatal(err)
	}
	if b := kafkaOf(t, cfg.Brokers["main"]); !b.TLS.On() || b.SASL.Password != "from-env" {
		t.Errorf("broker: %+v", b)
	}

	_, err = load(t, `
profile: production
store: {dsn: "postgres://h/db"}
brokers:
  a:
    kind: kafka
    tls: {ca-file: /nowhere/ca.pem, cert-file: c.pem, insecure-skip-verify: true}
    sasl: {mechanism: gssapi}
  b:
    kind: kafka
    sasl: {mechanism: plain, user: u, password: p}
  c:
    kind: kafka
    sasl: {user: u}
  r:
    kind: rabbitmq
    url: amqp://h/
    tls: {enabled: true}
`)
	wantProblem(t, err, "brokers.a.tls.ca-file", "cannot read /nowhere/ca.pem")
	wantProblem(t, err, "brokers.a.tls", "cert-file and key-file go together")
	wantProblem(t, err, "brokers.a.tls.insecure-skip-verify", "production profile refuses")
	wantProblem(t, err, "brokers.a.sasl.mechanism", `"gssapi" is not a SASL mechanism`)
	wantProblem(t, err, "brokers.a.sasl.user", "missing")
	wantProblem(t, err, "brokers.a.sasl.password", "MSGX_BROKERS_A_SASL_PASSWORD")
	wantProblem(t, err, "brokers.b.sasl.mechanism", "refuses SASL PLAIN without TLS")
	wantProblem(t, err, "brokers.c.sasl.mechanism", "missing")
	// TLS is every adapter's; rabbitmq's needs an amqps:// URL.
	wantProblem(t, err, "brokers.r.tls", "needs an amqps:// URL")
}

func TestInstanceID(t *testing.T) {
	host := func() (string, error) { return "node-7.example", nil }
	for _, c := range []struct {
		listens []string
		want    string
	}{
		{[]string{"0.0.0.0:8081", ":8080"}, "node-7.example-8081"},
		{[]string{"", ":8080"}, "node-7.example-8080"},
		{[]string{"127.0.0.1:0", ":8080"}, "node-7.example"}, // an ephemeral port is no identity
		{nil, "node-7.example"},
	} {
		if got := defaultInstanceID(host, c.listens...); got != c.want {
			t.Errorf("defaultInstanceID(%q) = %q, want %q", c.listens, got, c.want)
		}
	}
	odd := func() (string, error) { return "my host:1", nil }
	if got := defaultInstanceID(odd); got != "my-host-1" {
		t.Errorf("a host name with illegal characters: %q", got)
	}
	none := func() (string, error) { return "", errors.New("no name") }
	if got := defaultInstanceID(none, ":8081"); got != "" {
		t.Errorf("no host name: %q", got)
	}

	cfg, err := load(t, "store: {dsn: \"sqlite:a.db\"}\n", "MSGX_INSTANCE_ID=msgx-a")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.InstanceID != "msgx-a" {
		t.Errorf("MSGX_INSTANCE_ID not applied: %q", cfg.InstanceID)
	}
	_, err = load(t, "store: {dsn: \"sqlite:a.db\"}\ninstance-id: \"a b\"\nbrokers: {r: {kind: rabbitmq, url: \"amqp://h\", session-timeout: 10s}, k: {kind: kafka, session-timeout: 100ms}}\n")
	wantProblem(t, err, "instance-id", "only letters")
	wantProblem(t, err, "brokers.k.session-timeout", "between 1s and 30m")
	wantProblem(t, err, "brokers.r.session-timeout", "not a key of a rabbitmq broker")
}

// The Kafka producer's limit defaults to Kafka's message.max.bytes and is
// validated; it is a Kafka setting only.
func TestKafkaMaxMessageBytes(t *testing.T) {
	cfg, err := load(t, `
store: {dsn: "sqlite:a.db"}
brokers:
  main: {kind: kafka}
  big: {kind: kafka, max-message-bytes: 4194304}
`)
	if err != nil {
		t.Fatal(err)
	}
	if got := kafkaOf(t, cfg.Brokers["main"]).MaxMessageBytes; got != 1_048_588 {
		t.Errorf("default max-message-bytes %d, want 1048588", got)
	}
	if got := kafkaOf(t, cfg.Brokers["big"]).MaxMessageBytes; got != 4<<20 {
		t.Errorf("max-message-bytes %d, want 4194304", got)
	}
	_, err = load(t, `
store: {dsn: "sqlite:a.db"}
brokers:
  low: {kind: kafka, max-message-bytes: 100}
  high: {kind: kafka, max-message-bytes: 2000000000}
  r: {kind: rabbitmq, url: "amqp://h/", max-message-bytes: 1048588}
`)
	wantProblem(t, err, "brokers.low.max-message-bytes", "must be between 1024 and 1073741824")
	wantProblem(t, err, "brokers.high.max-message-bytes", "must be between 1024 and 1073741824")
	wantProblem(t, err, "brokers.r.max-message-bytes", "not a key of a rabbitmq broker")
}

func TestMailboxLateRows(t *testing.T) {
	const yml = `
store: {dsn: "sqlite:msgx.db"}
mailboxes:
  m: {kind: store}
`
	cfg, err := load(t, yml)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Mailboxes["m"].LateRows; got != LateRowsRefuse {
		t.Errorf("late-rows defaults to %q, want %q", got, LateRowsRefuse)
	}
	cfg, err = load(t, yml, "MSGX_MAILBOXES_M_LATE_ROWS=process")
	if err != nil || cfg.Mailboxes["m"].LateRows != LateRowsProcess {
		t.Errorf("late-rows process: %+v %v", cfg.Mailboxes["m"], err)
	}
	_, err = load(t, yml, "MSGX_MAILBOXES_M_LATE_ROWS=take")
	wantProblem(t, err, "mailboxes.m.late-rows", "neither refuse nor process")
}

// mailboxes.NAME.unreadable-after defaults to 30 s and must be positive.
func TestMailboxUnreadableAfter(t *testing.T) {
	cfg, err := load(t, "store: {dsn: \"sqlite:x.db\"}\nmailboxes: {local: {kind: store, start: from-beginning}}")
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Mailboxes["local"].UnreadableAfter.D(); got != 30*time.Second {
		t.Errorf("default unreadable-after %s, want 30s", got)
	}
	_, err = load(t, "store: {dsn: \"sqlite:x.db\"}\nmailboxes: {local: {kind: store, start: from-beginning, unreadable-after: -1s}}")
	wantProblem(t, err, "mailboxes.local.unreadable-after", "must be positive")
}

// A misspelt variable, or one of an entry the file does not define, is an
// error naming it, as an unknown key in the file is; the command's own
// variables are not keys and pass.
func TestUnknownEnvironmentVariables(t *testing.T) {
	yml := `
store: {dsn: "postgres://file@h/db"}
brokers: {main: {kind: kafka, seeds: ["a:1"]}}
`
	_, err := load(t, yml, "MSGX_STORE_DNS=postgres://env@h/db", "MSGX_BROKERS_OTHER_URL=amqp://x", "MSGX_BROKERS_MAIN_SEDS=b:2")
	wantProblem(t, err, "MSGX_STORE_DNS", "no configuration key has this variable (did you mean MSGX_STORE_DSN?)")
	wantProblem(t, err, "MSGX_BROKERS_MAIN_SEDS", "(did you mean MSGX_BROKERS_MAIN_SEEDS?)")
	wantProblem(t, err, "MSGX_BROKERS_OTHER_URL", "a variable can only override a key the file or the default has")
	if n := len(problemsOf(t, err)); n != 3 {
		t.Errorf("%d problems, want 3:\n%v", n, err)
	}
	cfg, err := load(t, yml, "MSGX_STORE_DSN=postgres://env@h/db", "MSGX_CONFIG=x.yaml", "MSGX_ADMIN_TOKEN=t", "OTHER_STORE_DNS=x")
	if err != nil || cfg.Store.DSN != "postgres://env@h/db" {
		t.Fatalf("known variables: %v %+v", err, cfg)
	}
}

// Every MSGX_ variable the repository's code reads is a key's or listed in
// OtherVariables, so that setting it never stops the service from starting.
func TestOtherVariablesListsEveryVariableRead(t *testing.T) {
	other := map[string]bool{}
	for _, v := range OtherVariables() {
		other[v] = true
	}
	sections := map[string]bool{}
	for _, k := range Keys(&Config{}) {
		sections[EnvName(strings.Split(k, ".")[0])] = true
	}
	for _, s := range []string{"brokers", "mailboxes", "streams", "pipelines"} {
		sections[EnvName(s)] = true
	}
	lit := regexp.MustCompile(`"(MSGX_[A-Z0-9_]+)"`)
	err := filepath.WalkDir("../..", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range lit.FindAllStringSubmatch(string(b), -1) {
			name, isKey := m[1], false
			for s := range sections {
				isKey = isKey || name == s || strings.HasPrefix(name, s+"_")
			}
			if !isKey && !other[name] {
				t.Errorf("%s reads %s, which is neither a key's variable nor in OtherVariables", path, name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A broker block may take its keys from an anchor (a merge key or an
// alias); they are checked as its own.
func TestBrokerMergeKeys(t *testing.T) {
	cfg, err := load(t, `
store: {dsn: "sqlite:a.db"}
brokers:
  base: &kafka {kind: kafka, seeds: ["h:9092"], acks: leader}
  a: {<<: *kafka, client-id: a}
`)
	if err != nil {
		t.Fatal(err)
	}
	if a := kafkaOf(t, cfg.Brokers["a"]); a.ClientID != "a" || a.Acks != "leader" || strings.Join(a.Seeds, ",") != "h:9092" {
		t.Errorf("merged block: %+v", a)
	}
	_, err = load(t, `
store: {dsn: "sqlite:a.db"}
brokers:
  k: {kind: kafka, tls: &tls {ca-file: /nowhere/ca.pem, ca-fiel: x}}
  r: {kind: rabbitmq, url: "amqps://h/", tls: *tls}
`)
	wantProblem(t, err, "brokers.r.tls.ca-file", "cannot read /nowhere/ca.pem")
	wantProblem(t, err, "brokers.r.tls.ca-fiel", "not a key of a rabbitmq broker")
}

// Keys of one broker kind given to another are refused by name, not ignored.
func TestBrokerKeysOfAnotherKind(t *testing.T) {
	_, err := load(t, `
store: {dsn: "sqlite:a.db"}
brokers:
  r: {kind: rabbitmq, url: "amqp://h/", client-id: msgx, compacted-topics: [sis.schd]}
  n: {kind: nats, url: "nats://h", seeds: ["h:4222"]}
  k: {kind: kafka, url: "kafka://h:9092", seeds: ["h:9092"]}
  m: {kind: mem, url: "mem://x"}
`)
	wantProblem(t, err, "brokers.r.client-id", "line 4: not a key of a rabbitmq broker (its keys here: auth, tls, url)")
	wantProblem(t, err, "brokers.r.compacted-topics", "not a key of a rabbitmq broker")
	wantProblem(t, err, "brokers.n.seeds", "not a key of a nats broker")
	wantProblem(t, err, "brokers.k.url", "not a key of a kafka broker (its keys here: acks, client-id, compacted-topics, idempotence, max-message-bytes, sasl, seeds, session-timeout, tls)")
	wantProblem(t, err, "brokers.m.url", "not a key of a mem broker")
	if n := len(problemsOf(t, err)); n != 5 {
		t.Errorf("%d problems, want 5:\n%v", n, err)
	}
}

// An admin token reachable from the network (the production profile, or a
// listener beyond loopback) must look random; on loopback in the embedded
// profile 16 characters do.
func TestAdminTokenStrength(t *testing.T) {
	for _, c := range []struct{ secret, fragment string }{
		{strings.Repeat("a", 16), "at least 32 characters"},
		{strings.Repeat("a", 40), "distinct characters"},
		{strings.Repeat("abcdefghij", 4), "repeats a pattern of 10"},
		{"Correct-Horse-Battery-Staple-Password-2026", `"password"`},
		{"xK9-changeme-Qz7-Lw2-Rt5-Yp8-Nb3-Vc6-Hj", `"changeme"`},
		{"Qm8sT4vX2nLp9wRk7bJc3yHf6dZg1aEuABCDEFG", "run of characters"},
		{"Qm8sT4vX2nLp9wRk7bJc3yHf6dZg1aEu00000", "run of characters"},
		{"ababababcdcdcdcdefefefefghghghghijijijij", "repeats pairs"},
	} {
		_, err := load(t, production, "MSGX_ADMIN_OPERATOR_TOKEN="+c.secret)
		wantProblem(t, err, "admin.operator-token", c.fragment)
	}
	for _, good := range []string{token, "4f9c2b7e1a8d3f6c0b5e9a2d7c4f1b8e", "q3JrX0m+U6Z1o9yXc8pWkT5n2vLd7sQbH4eRgA1fM0Y="} {
		if _, err := load(t, production, "MSGX_ADMIN_OPERATOR_TOKEN="+good); err != nil {
			t.Errorf("a random token %q refused: %v", good, err)
		}
	}
	embedded := strings.Replace(production, "profile: production", "profile: embedded", 1)
	if _, err := load(t, embedded, "MSGX_ADMIN_OPERATOR_TOKEN=0123456789abcdef"); err != nil {
		t.Errorf("16 characters on loopback in the embedded profile: %v", err)
	}
	_, err := load(t, embedded, "MSGX_ADMIN_OPERATOR_TOKEN=0123456789abcdef", "MSGX_ADMIN_LISTEN=0.0.0.0:8081")
	wantProblem(t, err, "admin.operator-token", "at least 32 characters")
}

// The embedded profile refuses an admin listener beyond loopback without a
// token, unless told knowingly; the production profile refuses that switch.
func TestOpenAdminOnlyOnLoopback(t *testing.T) {
	const embedded = `
store: {dsn: "sqlite:x.db"}
admin: {listen: "127.0.0.1:8081"}
`
	if _, err := load(t, embedded); err != nil {
		t.Fatalf("an open admin listener on loopback: %v", err)
	}
	for _, listen := range []string{"0.0.0.0:8081", ":8081", "[::]:8081", "10.0.0.5:8081", "msgx.internal:8081"} {
		_, err := load(t, embedded, "MSGX_ADMIN_LISTEN="+listen)
		wantProblem(t, err, "admin.listen", "not a loopback address and no admin token")
	}
	for _, listen := range []string{"localhost:8081", "[::1]:8081", "127.0.0.2:0"} {
		if _, err := load(t, embedded, "MSGX_ADMIN_LISTEN="+listen); err != nil {
			t.Errorf("%s: %v", listen, err)
		}
	}
	if _, err := load(t, embedded, "MSGX_ADMIN_LISTEN=0.0.0.0:8081", "MSGX_ADMIN_ALLOW_OPEN_NETWORK=true"); err != nil {
		t.Errorf("the explicit override: %v", err)
	}
	_, err := load(t, production, "MSGX_ADMIN_ALLOW_OPEN_NETWORK=true")
	wantProblem(t, err, "admin.allow-open-network", "production profile refuses it")
}

// Named tokens: a scope and a secret each, the secret from the
// environment; names, scopes and secrets checked.
func TestNamedAdminTokens(t *testing.T) {
	const other = "Zt8qLw3vR9xK2mN7pB4sD6fH1jG5cY0eUa7"
	yml := strings.Replace(production, `admin: {listen: "127.0.0.1:0", operator-token: "`+token+`"}`, `admin:
  listen: "127.0.0.1:0"
  hosts: [msgx-admin.internal]
  tokens:
    alice: {scope: operator}
    monitoring: {scope: read, secret: "`+other+`"}`, 1)
	cfg, err := load(t, yml, "MSGX_ADMIN_TOKENS_ALICE_SECRET="+token)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Admin.Tokens["alice"] != (AdminToken{Scope: "operator", Secret: token}) || cfg.Admin.Tokens["monitoring"].Scope != "read" ||
		strings.Join(cfg.Admin.Hosts, ",") != "msgx-admin.internal" || cfg.Admin.NoAdminToken() {
		t.Errorf("admin: %+v", cfg.Admin)
	}
	_, err = load(t, yml)
	wantProblem(t, err, "admin.tokens.alice.secret", "missing")
	_, err = load(t, yml, "MSGX_ADMIN_TOKENS_ALICE_SECRET="+other)
	wantProblem(t, err, "admin.tokens.monitoring.secret", "must differ from admin.tokens.alice.secret")
	_, err = load(t, yml, "MSGX_ADMIN_TOKENS_ALICE_SECRET="+token, "MSGX_ADMIN_TOKENS_ALICE_SCOPE=admin")
	wantProblem(t, err, "admin.tokens.alice.scope", `"admin" is not a scope`)
	_, err = load(t, yml, "MSGX_ADMIN_TOKENS_ALICE_SECRET="+token, "MSGX_ADMIN_OPERATOR_TOKEN=q3JrX0m+U6Z1o9yXc8pWkT5n2vLd7sQbH4eRgA1fM0Y=",
		"MSGX_ADMIN_HOSTS=http://x")
	wantProblem(t, err, "admin.hosts", "not a host name")
	_, err = load(t, strings.Replace(yml, "alice:", "operator:", 1), "MSGX_ADMIN_TOKENS_OPERATOR_SECRET="+token,
		"MSGX_ADMIN_OPERATOR_TOKEN=q3JrX0m+U6Z1o9yXc8pWkT5n2vLd7sQbH4eRgA1fM0Y=")
	wantProblem(t, err, "admin.tokens.operator", "admin.operator-token's")
	_, err = load(t, strings.Replace(yml, "alice:", "\"al ice\":", 1))
	wantProblem(t, err, "admin.tokens.al ice", "a token's name")
}
