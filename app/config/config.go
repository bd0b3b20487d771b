// Package config is the msgx service's one configuration: a YAML file, every
// key of which an environment variable can override (MSGX_ + the key path in
// upper case, separators as underscores: store.dsn → MSGX_STORE_DSN,
// brokers.main.seeds → MSGX_BROKERS_MAIN_SEEDS), defaults for what is left
// out, and a validation that reports every invalid value at once. With no
// file the embedded default applies: a SQLite file and the in-process broker.
//
// A broker block is decoded by the adapter its kind names, from the
// brokers.Registry given to Load: the adapter owns its keys, defaults and
// checks (package broker/brokers), so this package imports no adapter.
//
// The production profile refuses what is only safe on a developer's machine:
// SQLite, an admin listener without a token or with a guessable one, a
// shared mailbox without an explicit start position, a listener on a
// non-loopback address without TLS or a trusted TLS proxy, an HTTP ingress
// without senders unless ingress.open says it is meant, and what each broker
// adapter refuses (the in-memory broker, Kafka producers without acks=all
// and idempotence, TLS that verifies nothing, a SASL PLAIN password sent
// without TLS).
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/msgx/msgx/broker/brokers"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/source/mailbox"
)

// Profiles.
const (
	Embedded   = "embedded"
	Production = "production"
)

// Mailbox kinds.
const (
	// MailboxMySQL is the shared legacy table on a MySQL/MariaDB server.
	MailboxMySQL = "mysql"
	// MailboxStore is a table of the same shape in the engine's own store.
	MailboxStore = "store"
)

// Config is the whole service configuration.
type Config struct {
	// Profile is embedded (default) or production.
	Profile string `yaml:"profile"`
	// InstanceID names this process among the instances of the service:
	// Kafka consumer groups know it as its static membership
	// (group.instance.id), so that a restarted instance takes its partitions
	// back at once. It must stay the same across restarts and differ between
	// the instances that run at the same time. Default: the host name, plus
	// "-<port>" of admin.listen (or of ingress.listen when the admin listener
	// is off) when that port is fixed, so two instances on one host differ.
	InstanceID string `yaml:"instance-id"`
	// Shadow reads the mailboxes and processes, but never writes the processed
	// mark (backfill) or the outbound mailbox, and takes no HTTP ingress.
	Shadow    bool                `yaml:"shadow"`
	Log       Log                 `yaml:"log"`
	Store     Store               `yaml:"store"`
	Admin     Admin               `yaml:"admin"`
	Ingress   Ingress             `yaml:"ingress"`
	Brokers   map[string]Broker   `yaml:"brokers"`
	Mailboxes map[string]Mailbox  `yaml:"mailboxes"`
	Streams   map[string]Stream   `yaml:"streams"`
	Pipelines map[string]Pipeline `yaml:"pipelines"`
	Relay     Relay               `yaml:"relay"`
	Outbox    Outbox              `yaml:"outbox"`
	Tracing   Tracing             `yaml:"tracing"`
	// ShutdownTimeout bounds the graceful stop after SIGINT/SIGTERM.
	ShutdownTimeout Duration `yaml:"shutdown-timeout"`

	// Defaulted is true when no file was given: streams whose processor is
	// not part of this build are then skipped with a log line instead of
	// refused.
	Defaulted bool `yaml:"-"`
}

// Log configures log/slog.
type Log struct {
	Level  string `yaml:"level"`  // debug | info | warn | error
	Format string `yaml:"format"` // text | json
}

// Store is the engine's database.
type Store struct {
	DSN      string `yaml:"dsn"`
	MaxConns int    `yaml:"max-conns"`
	// Migrate applies the embedded migrations at start (default true).
	Migrate *bool `yaml:"migrate"`
	// StartTimeout is how long the service keeps trying to reach the store
	// at start before it gives up (default 2m); the store is the one thing
	// it cannot work without.
	StartTimeout Duration `yaml:"start-timeout"`
}

// Admin is the admin listener: the admin API, the console, /metrics,
// /healthz, /readyz.
type Admin struct {
	// Listen is host:port; empty disables the listener.
	Listen string `yaml:"listen"`
	// ReadToken and OperatorToken are the secrets of the tokens named "read"
	// and "operator" (one shared token per scope).
	ReadToken     string `yaml:"read-token"`
	OperatorToken string `yaml:"operator-token"`
	// Tokens are named tokens: the audit records the name, so give each
	// person or system its own.
	Tokens map[string]AdminToken `yaml:"tokens"`
	// Hosts are the DNS names clients reach the listener by; a request's
	// Host must be one of them, localhost or an IP address.
	Hosts []string `yaml:"hosts"`
	// AllowOpenNetwork lets an embedded-profile listener without a token
	// listen beyond loopback and serve any client: anyone who reaches it
	// can replay.
	AllowOpenNetwork bool `yaml:"allow-open-network"`
	// TLS serves HTTPS from a certificate and key reloaded when they change.
	TLS ListenerTLS `yaml:"tls"`
	// TrustedProxies are the addresses (CIDR or single) of the
	// TLS-terminating proxies in front of the listener; their
	// X-Forwarded-Proto and X-Forwarded-For are believed, no one else's.
	TrustedProxies []string   `yaml:"trusted-proxies"`
	Limits         HTTPLimits `yaml:"limits"`
}

// AdminToken is a named admin token.
type AdminToken struct {
	// Scope is read or operator.
	Scope string `yaml:"scope"`
	// Secret is the bearer token (keep it in the environment:
	// MSGX_ADMIN_TOKENS_<NAME>_SECRET).
	Secret string `yaml:"secret"`
}

// NoAdminToken tells whether the admin listener has no token at all (every
// caller is an operator).
func (a Admin) NoAdminToken() bool {
	return a.ReadToken == "" && a.OperatorToken == "" && len(a.Tokens) == 0
}

// ListenerTLS is the TLS of one of msgx's own listeners.
type ListenerTLS struct {
	// CertFile and KeyFile are the server certificate (with its chain) and
	// key, PEM; both are read again when either changes.
	CertFile string `yaml:"cert-file"`
	KeyFile  string `yaml:"key-file"`
	// ClientCAFile (ingress only) is a PEM bundle of the CAs whose client
	// certificates authenticate senders (ingress.senders.NAME.cert-names).
	ClientCAFile string `yaml:"client-ca-file"`
}

// On reports whether the listener serves TLS.
func (t ListenerTLS) On() bool { return t.CertFile != "" || t.KeyFile != "" }

// HTTPLimits bound what one client can hold of a listener.
type HTTPLimits struct {
	ReadHeaderTimeout Duration `yaml:"read-header-timeout"`
	ReadTimeout       Duration `yaml:"read-timeout"`
	WriteTimeout      Duration `yaml:"write-timeout"`
	IdleTimeout       Duration `yaml:"idle-timeout"`
	// MinBodyRate is the slowest a request body may arrive after its first
	// 5 s, in bytes per second.
	MinBodyRate int64 `yaml:"min-body-rate"`
	// MaxConnsPerClient bounds the connections of one client address.
	MaxConnsPerClient int `yaml:"max-conns-per-client"`
}

// Ingress is the legacy HTTP entry point POST /cminmsgs/send.
type Ingress struct {
	// Listen is host:port; empty disables the ingress.
	Listen string `yaml:"listen"`
	// Stream receives the messages (its mailbox stores them first).
	Stream   string   `yaml:"stream"`
	MaxBytes int64    `yaml:"max-bytes"`
	Timeout  Duration `yaml:"timeout"`
	// Senders are the clients allowed to post and the SNDR values each may
	// claim. With none, any client that reaches the listener may post any
	// message: the production profile wants Open then.
	Senders map[string]IngressSender `yaml:"senders"`
	// Open says that an ingress without senders is meant (production).
	Open           bool        `yaml:"open"`
	TLS            ListenerTLS `yaml:"tls"`
	TrustedProxies []string    `yaml:"trusted-proxies"`
	Limits         HTTPLimits  `yaml:"limits"`
}

// IngressSender is a client allowed to post: every check it has must hold.
type IngressSender struct {
	// Addresses are its client addresses (CIDR or single addresses).
	Addresses []string `yaml:"addresses"`
	// Token is the bearer token it sends (at least 16 characters; from the
	// environment: MSGX_INGRESS_SENDERS_NAME_TOKEN).
	Token string `yaml:"token"`
	// CertNames are the names (common name or DNS name) of its client
	// certificate, verified against ingress.tls.client-ca-file.
	CertNames []string `yaml:"cert-names"`
	// SNDR are the META/SNDR values its messages may claim.
	SNDR []string `yaml:"sndr"`
	// MaxPerMinute caps its posts a minute (0: no cap).
	MaxPerMinute int `yaml:"max-per-minute"`
}

// Broker is one broker connection: its kind, and the settings of the
// adapter of that kind (its keys sit beside kind in the block).
type Broker struct {
	Kind string `yaml:"kind"`
	// Settings are the adapter's keys, decoded by Load with the adapter
	// kind names (nil while the kind is unknown). Type-assert it to the
	// adapter's Config (*kafka.Config) to read them.
	Settings brokers.Config `yaml:"-" config:"inline"`
	// node is the block as parsed, until Load decodes it into Settings.
	node *yaml.Node
}

// UnmarshalYAML implements yaml.Unmarshaler: it reads kind and keeps the
// block for the adapter kind names.
func (b *Broker) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: a broker is a mapping (kind: and its settings)", n.Line)
	}
	n, err := mergeKeys(n)
	if err != nil {
		return err
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "kind" {
			b.Kind = n.Content[i+1].Value
		}
	}
	b.node = n
	return nil
}

// Mailbox is a mailbox table.
type Mailbox struct {
	Kind string `yaml:"kind"` // mysql | store
	// DSN is go-sql-driver/mysql's (user@tcp(host:3306)/db) for kind mysql.
	DSN            string `yaml:"dsn"`
	Table          string `yaml:"table"`
	ProcessedValue string `yaml:"processed-value"`
	// Shared marks a table other systems own and read (default true for
	// mysql): the production profile then wants an explicit Start.
	Shared *bool `yaml:"shared"`
	// Start is where a stream with no watermark yet begins: from-beginning,
	// from-now or from-id:N (the first row read is N+1).
	Start          string   `yaml:"start"`
	PollInterval   Duration `yaml:"poll-interval"`
	ClaimBatch     int      `yaml:"claim-batch"`
	ScansPerCommit int      `yaml:"scans-per-commit"`
	MaxCommitDelay Duration `yaml:"max-commit-delay"`
	// LateRows is what becomes of a row that commits after its gap was
	// declared permanent: refuse (kept DEAD as LATE, not processed) or
	// process (processed after the newer rows it missed).
	LateRows string `yaml:"late-rows"`
	// UnreadableAfter is how long the mailbox may fail to be read (missing
	// table, refused login, lost connection) before /readyz fails.
	UnreadableAfter Duration `yaml:"unreadable-after"`
}

// Late-row policies of a mailbox.
const (
	LateRowsRefuse  = "refuse"
	LateRowsProcess = "process"
)

// Stream is one inbox stream: a source, a processor and the engine's settings.
type Stream struct {
	// Processor names a processor registered in this build (e.g. "sis").
	Processor string `yaml:"processor"`
	// Mailbox names the mailbox the stream polls (empty: no poller).
	Mailbox string `yaml:"mailbox"`
	// Sources are further feeds of the stream by name: broker listeners.
	Sources map[string]Source `yaml:"sources"`
	// Options are handed to the processor's factory as they are.
	Options      map[string]string `yaml:"options"`
	GroupSize    int               `yaml:"group-size"`
	MaxAttempts  int               `yaml:"max-attempts"`
	Backoff      Backoff           `yaml:"backoff"`
	HeadDeadline Duration          `yaml:"head-deadline"`
	PollInterval Duration          `yaml:"poll-interval"`
	Lease        Duration          `yaml:"lease"`
	// Backfill writes the processed mark to the mailbox (default true; never
	// in shadow mode).
	Backfill        *bool    `yaml:"backfill"`
	BackfillEvery   Duration `yaml:"backfill-every"`
	OverdueBackfill Duration `yaml:"overdue-backfill"`
	BackfillBatch   int      `yaml:"backfill-batch"`
	// ArchiveAfter moves terminal rows older than it to the archive (0: off).
	ArchiveAfter Duration `yaml:"archive-after"`
}

// Source kinds.
const (
	// SourceBroker is a broker listener.
	SourceBroker = "broker"
)

// Source is a feed of a stream other than its mailbox: a broker listener
// whose deliveries become the stream's inbox messages in delivery order.
type Source struct {
	Kind string `yaml:"kind"` // broker
	// Broker names an entry of brokers.
	Broker string `yaml:"broker"`
	// Topic and Group are what the listener consumes (a consumer group, a
	// queue, a durable consumer: the broker's own notion).
	Topic string `yaml:"topic"`
	Group string `yaml:"group"`
	// MaxBytes is the largest payload taken in; larger ones are dead-lettered.
	MaxBytes int64 `yaml:"max-bytes"`
}

// Backoff is a retry delay policy.
type Backoff struct {
	Initial Duration `yaml:"initial"`
	Max     Duration `yaml:"max"`
}

// Pipeline is a registered pipeline (e.g. routepassport) and its options.
type Pipeline struct {
	Enabled *bool             `yaml:"enabled"`
	Broker  string            `yaml:"broker"`
	Options map[string]string `yaml:"options"`
}

// Relay is the outbox relay.
type Relay struct {
	Targets        map[string]Target `yaml:"targets"`
	MaxAttempts    int               `yaml:"max-attempts"`
	Backoff        Backoff           `yaml:"backoff"`
	Lease          Duration          `yaml:"lease"`
	PublishTimeout Duration          `yaml:"publish-timeout"`
	PollInterval   Duration          `yaml:"poll-interval"`
	Retention      Duration          `yaml:"retention"`
}

// Outbox chooses how the events reach the relay (docs/outbox.md).
type Outbox struct {
	// Mode is table (default: rows of msgx_outbox) or wal (PostgreSQL's
	// logical decoding: needs wal_level=logical and the REPLICATION
	// attribute).
	Mode string `yaml:"mode"`
	// Slot names the wal mode's replication slot (default msgx_outbox).
	Slot string `yaml:"slot"`
}

// Target is one relay target (an outbox.Event's Target) and its lane.
type Target struct {
	Broker      string   `yaml:"broker"`
	Lane        string   `yaml:"lane"` // unordered | per-key | compacted
	Batch       int      `yaml:"batch"`
	Workers     int      `yaml:"workers"`
	FlushPeriod Duration `yaml:"flush-period"`
	FlushLimit  int      `yaml:"flush-limit"`
}

// Tracing switches OpenTelemetry tracing on; the exporter itself is chosen by
// the standard OTEL_* variables. Tracing is on when Enabled is true or
// OTEL_TRACES_EXPORTER names an exporter other than none.
type Tracing struct {
	Enabled     bool   `yaml:"enabled"`
	ServiceName string `yaml:"service-name"`
}

// Duration is a time.Duration written as "1s", "5m", "250ms".
type Duration time.Duration

// D is the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration (e.g. 500ms, 10s, 5m)", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML implements yaml.Marshaler.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// Load reads the file at path (empty: the embedded default), decodes each
// broker block with the adapter of its kind from adapters, applies the
// environment (a list of KEY=value, usually os.Environ()), fills in the
// defaults and validates. Every problem is reported in one error.
func Load(path string, environ []string, adapters *brokers.Registry) (*Config, error) {
	var cfg *Config
	if path == "" {
		cfg = EmbeddedDefault()
	} else {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		if cfg, err = Parse(b); err != nil {
			return nil, fmt.Errorf("config %s: %w", path, err)
		}
	}
	problems, cleared := cfg.decodeBrokers(adapters, environ)
	problems = append(problems, applyEnv(cfg, environ, cleared)...)
	cfg.setDefaults()
	problems = append(problems, cfg.validate()...)
	if len(problems) > 0 {
		return nil, &Error{Problems: problems}
	}
	return cfg, nil
}

// Parse decodes a YAML document; unknown keys are an error.
func Parse(b []byte) (*Config, error) {
	cfg := &Config{}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return cfg, nil
}

// Error lists every invalid value.
type Error struct {
	Problems []string
}

func (e *Error) Error() string {
	return fmt.Sprintf("invalid configuration (%d problems):\n  %s", len(e.Problems), strings.Join(e.Problems, "\n  "))
}

// EmbeddedDefault is the configuration used with no file: everything in one
// process on a SQLite file and the in-process broker, with a relay target for
// each of the SIS stream's three outbox targets. deploy/msgx.embedded.yaml
// writes it out (a test keeps the two equal).
func EmbeddedDefault() *Config {
	return &Config{
		Profile:   Embedded,
		Defaulted: true,
		Store:     Store{DSN: "sqlite:msgx.db"},
		Admin:     Admin{Listen: "127.0.0.1:8081"},
		Ingress:   Ingress{Listen: "127.0.0.1:8080", Stream: "sis"},
		Brokers:   map[string]Broker{"local": {Kind: "mem"}},
		Mailboxes: map[string]Mailbox{"local": {Kind: MailboxStore, Table: "cminmsgs", Start: "from-beginning"}},
		Streams:   map[string]Stream{"sis": {Processor: "sis", Mailbox: "local"}},
		Relay: Relay{Targets: map[string]Target{
			"kafka:msg":  {Broker: "local", Lane: "per-key"},
			"kafka:ref":  {Broker: "local", Lane: "per-key"},
			"kafka:schd": {Broker: "local", Lane: "compacted"},
		}},
	}
}

func (c *Config) setDefaults() {
	orDefault(&c.Profile, Embedded)
	if c.InstanceID == "" {
		c.InstanceID = defaultInstanceID(os.Hostname, c.Admin.Listen, c.Ingress.Listen)
	}
	orDefault(&c.Log.Level, "info")
	orDefault(&c.Log.Format, "text")
	orDefault(&c.Store.Migrate, ptr(true))
	orDefault(&c.Store.StartTimeout, Duration(2*time.Minute))
	orDefault(&c.ShutdownTimeout, Duration(30*time.Second))
	orDefault(&c.Ingress.MaxBytes, 16<<20-1)
	orDefault(&c.Ingress.Timeout, Duration(10*time.Second))
	c.Admin.Limits.setDefaults()
	c.Ingress.Limits.setDefaults()
	if c.Ingress.Stream == "" && len(c.Streams) == 1 {
		for name := range c.Streams {
			c.Ingress.Stream = name
		}
	}
	for _, b := range c.Brokers {
		if b.Settings != nil {
			b.Settings.SetDefaults()
		}
	}
	for name, m := range c.Mailboxes {
		orDefault(&m.Table, "cminmsgs")
		orDefault(&m.ProcessedValue, "PROCESSED")
		orDefault(&m.Shared, ptr(m.Kind == MailboxMySQL))
		orDefault(&m.PollInterval, Duration(mailbox.DefaultPollInterval))
		orDefault(&m.ClaimBatch, mailbox.DefaultClaimBatch)
		orDefault(&m.ScansPerCommit, mailbox.DefaultScansPerCommit)
		orDefault(&m.MaxCommitDelay, Duration(mailbox.DefaultMaxCommitDelay))
		orDefault(&m.LateRows, LateRowsRefuse)
		orDefault(&m.UnreadableAfter, Duration(mailbox.DefaultUnreadableAfter))
		c.Mailboxes[name] = m
	}
	for name, s := range c.Streams {
		backoff := inbox.DefaultBackoff()
		orDefault(&s.GroupSize, inbox.DefaultGroupSize)
		orDefault(&s.MaxAttempts, inbox.DefaultMaxAttempts)
		orDefault(&s.Backoff.Initial, Duration(backoff.Initial))
		orDefault(&s.Backoff.Max, Duration(backoff.Max))
		orDefault(&s.HeadDeadline, Duration(inbox.DefaultHeadDeadline))
		orDefault(&s.PollInterval, Duration(inbox.DefaultPollInterval))
		orDefault(&s.Lease, Duration(inbox.DefaultLease))
		orDefault(&s.Backfill, ptr(true))
		orDefault(&s.BackfillEvery, Duration(inbox.DefaultBackfillEvery))
		orDefault(&s.OverdueBackfill, Duration(inbox.DefaultBackfillOverdue))
		orDefault(&s.BackfillBatch, inbox.DefaultBackfillBatch)
		for sn, src := range s.Sources {
			orDefault(&src.MaxBytes, 16<<20-1)
			s.Sources[sn] = src
		}
		c.Streams[name] = s
	}
	for name, p := range c.Pipelines {
		orDefault(&p.Enabled, ptr(true))
		c.Pipelines[name] = p
	}
	r := &c.Relay
	retry := outbox.DefaultRetry()
	orDefault(&r.MaxAttempts, retry.MaxAttempts)
	orDefault(&r.Backoff.Initial, Duration(retry.Initial))
	orDefault(&r.Backoff.Max, Duration(retry.Max))
	orDefault(&r.Lease, Duration(outbox.DefaultLease))
	orDefault(&r.PublishTimeout, Duration(outbox.DefaultPublishTimeout))
	orDefault(&r.PollInterval, Duration(outbox.DefaultPollInterval))
	orDefault(&r.Retention, Duration(outbox.DefaultRetention))
	for name, t := range r.Targets {
		orDefault(&t.Lane, outbox.PerKey.String())
		orDefault(&t.Batch, outbox.DefaultBatch)
		if t.Workers == 0 {
			t.Workers = outbox.DefaultWorkers
			if t.Lane == outbox.Compacted.String() {
				t.Workers = outbox.DefaultCompactedWorkers
			}
		}
		orDefault(&t.FlushPeriod, Duration(outbox.DefaultFlushPeriod))
		orDefault(&t.FlushLimit, outbox.DefaultFlushLimit)
		r.Targets[name] = t
	}
	orDefault(&c.Tracing.ServiceName, "msgx")
}

// setDefaults: the limits of internal/httpserve.DefaultLimits.
func (l *HTTPLimits) setDefaults() {
	orDefault(&l.ReadHeaderTimeout, Duration(10*time.Second))
	orDefault(&l.ReadTimeout, Duration(time.Minute))
	orDefault(&l.WriteTimeout, Duration(30*time.Second))
	orDefault(&l.IdleTimeout, Duration(time.Minute))
	orDefault(&l.MinBodyRate, 1<<10)
	orDefault(&l.MaxConnsPerClient, 16)
}

func ptr[T any](v T) *T { return &v }

// defaultInstanceID is the host name (characters an instance id may not
// hold replaced by '-') and, when the first listen address given has a
// fixed port, "-<port>": two processes on one host cannot listen on the same
// port, so their default ids differ, and a restart keeps its id. "" when the
// host name is unknown (validation then asks for instance-id).
func defaultInstanceID(hostname func() (string, error), listens ...string) string {
	h, err := hostname()
	if err != nil || h == "" {
		return ""
	}
	id := []byte(h)
	for i, b := range id {
		if !idChar(b) {
			id[i] = '-'
		}
	}
	for _, l := range listens {
		if l == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(l); err == nil && port != "" && port != "0" {
			id = append(append(id, '-'), port...)
		}
		break
	}
	return string(id)
}

// idChar: Kafka's rule for a group.instance.id.
func idChar(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '.' || b == '_' || b == '-'
}

// orDefault sets *p to v when it is the zero value (left out of the file).
func orDefault[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}

// StartPosition is a parsed mailbox.start.
type StartPosition struct {
	// Mode is from-beginning, from-now or from-id.
	Mode string
	// After is the last id skipped for from-id.
	After int64
}

// ParseStart reads from-beginning, from-now or from-id:N.
func ParseStart(s string) (StartPosition, error) {
	switch {
	case s == "from-beginning" || s == "from-now":
		return StartPosition{Mode: s}, nil
	case strings.HasPrefix(s, "from-id:"):
		n, err := strconv.ParseInt(strings.TrimPrefix(s, "from-id:"), 10, 64)
		if err != nil || n < 0 {
			return StartPosition{}, fmt.Errorf("%q: from-id needs a non-negative id (from-id:12345)", s)
		}
		return StartPosition{Mode: "from-id", After: n}, nil
	}
	return StartPosition{}, fmt.Errorf("%q is not a start position (from-beginning, from-now or from-id:N)", s)
}
