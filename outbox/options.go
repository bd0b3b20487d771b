package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/failpoint"
)

// Publisher is the part of the broker port the relay needs: a send that
// returns nil only after the broker confirmed every message.
// *broker.Broker implements it.
type Publisher interface {
	SendConfirmed(ctx context.Context, topic string, msgs ...*broker.Message) error
}

// LaneKind says how a target's events are relayed.
type LaneKind int

// The lane kinds.
const (
	// Unordered relays events in parallel, in batches, with no order promise.
	Unordered LaneKind = iota + 1
	// PerKey keeps the events of a key in id order: at most one event of a key
	// is in flight, a failing key blocks only itself, keys run in parallel. A
	// DEAD event holds its key until it is replayed or skipped.
	PerKey
	// Compacted sends only the newest pending event of each key (a Tombstone
	// as an empty payload); the older pending events of the key are marked
	// COVERED by it.
	Compacted
)

func (k LaneKind) String() string {
	switch k {
	case Unordered:
		return "unordered"
	case PerKey:
		return "per-key"
	case Compacted:
		return "compacted"
	}
	return fmt.Sprintf("lane(%d)", int(k))
}

// ParseLaneKind reads "unordered", "per-key" or "compacted".
func ParseLaneKind(s string) (LaneKind, error) {
	for _, k := range []LaneKind{Unordered, PerKey, Compacted} {
		if k.String() == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("outbox: unknown lane %q (want unordered, per-key or compacted)", s)
}

// The relay's defaults: what NewRelay and Target use for an option not
// given. They are the one copy of these values: a configuration that maps
// onto the options (app/config) takes its defaults from here.
const (
	DefaultBatch = 500
	// DefaultWorkers is a lane's claim-publish loops; a compacted lane has
	// DefaultCompactedWorkers.
	DefaultWorkers          = 2
	DefaultCompactedWorkers = 1
	DefaultFlushPeriod      = 3 * time.Second
	DefaultFlushLimit       = 500
	DefaultLease            = time.Minute
	DefaultPublishTimeout   = 15 * time.Second
	DefaultDBTimeout        = 15 * time.Second
	DefaultPollInterval     = 100 * time.Millisecond
	DefaultRetention        = 24 * time.Hour
	DefaultCleanupInterval  = time.Minute
	DefaultLagInterval      = 10 * time.Second
	// DefaultMaxLeaseExpiries bounds the claims of an event that ended
	// without a result (the relay holding it stopped or crashed).
	DefaultMaxLeaseExpiries = 20
)

// DefaultRetry is the relay's retry policy: 5 attempts, 1 s doubling to at
// most 60 s, 20% jitter.
func DefaultRetry() backoff.Policy {
	return backoff.Policy{MaxAttempts: 5, Initial: time.Second, Max: time.Minute, Multiplier: 2, Jitter: 0.2}
}

type laneConfig struct {
	target      string
	kind        LaneKind
	pub         Publisher
	batch       int
	workers     int
	flushPeriod time.Duration
	flushLimit  int
	ce          CloudEvents
}

// LaneOption configures one target's lane.
type LaneOption func(*laneConfig)

// CloudEvents describes a target's events as CloudEvents: the lane sends
// each with the headers of the CloudEvents Kafka protocol binding in binary
// content mode beside msgx's own, so a consumer can read it with a
// CloudEvents SDK: ce_specversion 1.0, ce_id (the event id), ce_source,
// ce_type, ce_time (when the event was written), ce_subject (the key, when
// there is one) and content-type (of a non-empty payload). On other
// brokers the same headers travel as the adapter carries headers.
type CloudEvents struct {
	// Source is ce_source: where the events come from, a URI reference
	// (/msgx/sis).
	Source string
	// Type is ce_type (msgx.sis.msg.v1); empty: no CloudEvents headers.
	Type string
	// ContentType is the content-type of a payload (default
	// application/json).
	ContentType string
}

// WithCloudEvents sends the lane's events as CloudEvents (see CloudEvents).
func WithCloudEvents(ce CloudEvents) LaneOption {
	return func(c *laneConfig) {
		if ce.ContentType == "" {
			ce.ContentType = "application/json"
		}
		c.ce = ce
	}
}

// headers adds ce's headers for the event id of key, written at
// created, with or without a payload, to h.
func (ce CloudEvents) headers(h map[string]string, id, key string, created time.Time, payload bool) {
	if ce.Type == "" {
		return
	}
	h["ce_specversion"], h["ce_id"], h["ce_source"], h["ce_type"] = "1.0", id, ce.Source, ce.Type
	h["ce_time"] = created.UTC().Format(time.RFC3339Nano)
	if key != "" {
		h["ce_subject"] = key
	}
	if payload {
		h["content-type"] = ce.ContentType
	}
}

// Batch sets how many events (unordered) or keys (per-key) one claim takes
// (default 500).
func Batch(n int) LaneOption { return func(c *laneConfig) { c.batch = n } }

// Workers sets how many claim-publish loops the lane runs at once in this
// process (default 2; compacted lanes 1).
func Workers(n int) LaneOption { return func(c *laneConfig) { c.workers = n } }

// FlushPeriod sets how long a compacted lane gathers changes between flushes
// (default 3 s). A flush that reached the limit is followed at once by the
// next, so a backlog drains at full speed.
func FlushPeriod(d time.Duration) LaneOption { return func(c *laneConfig) { c.flushPeriod = d } }

// FlushLimit bounds the keys of one compacted flush (default 500).
func FlushLimit(n int) LaneOption { return func(c *laneConfig) { c.flushLimit = n } }

type config struct {
	lanes           []laneConfig
	clock           clock.Clock
	logger          *slog.Logger
	registerer      prometheus.Registerer
	retry           backoff.Policy
	lease           time.Duration
	publishTimeout  time.Duration
	dbTimeout       time.Duration
	pollInterval    time.Duration
	retention       time.Duration
	cleanupInterval time.Duration
	lagInterval     time.Duration
	syncCommit      bool
	noWake          bool
	tracer          trace.Tracer
	// maxLeaseExpiries: see WithMaxLeaseExpiries.
	maxLeaseExpiries int
	// dbClockOff: see WithDatabaseClock; otherwise, on PostgreSQL, the
	// relay reads clock corrected to the database's clock (dbclock).
	dbClockOff bool
	// failpoints: see WithFailpoints.
	failpoints *failpoint.Set
	// wal: the WAL relay's settings (walconfig.go).
	wal walConfig
}

// Option configures a Relay.
type Option func(*config)

// Target relays the events of one target (Event.Target) through pub in a lane
// of the given kind.
func Target(name string, pub Publisher, kind LaneKind, opts ...LaneOption) Option {
	return func(c *config) {
		lc := laneConfig{target: name, kind: kind, pub: pub, batch: DefaultBatch, workers: DefaultWorkers,
			flushPeriod: DefaultFlushPeriod, flushLimit: DefaultFlushLimit}
		if kind == Compacted {
			lc.workers = DefaultCompactedWorkers
		}
		for _, o := range opts {
			o(&lc)
		}
		c.lanes = append(c.lanes, lc)
	}
}

// WithClock sets this host's clock (default the wall clock). On PostgreSQL
// the relay reads it corrected by its measured offset to the database
// server's clock, so that its leases and retries agree with the other
// relays' however far this host's clock is off (see WithDatabaseClock).
func WithClock(cl clock.Clock) Option { return func(c *config) { c.clock = cl } }

// WithDatabaseClock says whether, on PostgreSQL, the relay corrects its
// clock to the database server's (default true; SQLite has one process and
// no correction). Off, every scheduling decision reads the clock of
// WithClock as it is, which must then agree across the relays of a database
// to well under the lease: tests on a fake clock, or relays on the
// database's host.
func WithDatabaseClock(on bool) Option { return func(c *config) { c.dbClockOff = !on } }

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithFailpoints arms the relay's failpoint (failpoint.OutboxAfterConfirm;
// default none): a test setting of the reliability campaign.
func WithFailpoints(s *failpoint.Set) Option { return func(c *config) { c.failpoints = s } }

// WithRegisterer registers the relay's metrics (default: not registered).
func WithRegisterer(r prometheus.Registerer) Option { return func(c *config) { c.registerer = r } }

// WithRetry sets the retry policy of failed sends (default DefaultRetry); an
// event whose attempts are exhausted becomes DEAD.
func WithRetry(p backoff.Policy) Option { return func(c *config) { c.retry = p } }

// WithLease sets how long a claim is owned (default 1 min). A crashed relay's
// claims are taken over by others after it. It must exceed the publish timeout
// plus two database timeouts.
func WithLease(d time.Duration) Option { return func(c *config) { c.lease = d } }

// WithMaxLeaseExpiries bounds how many times an event may be claimed by
// relays that then stopped or crashed before recording a result (its lease
// expired) before it becomes DEAD (default DefaultMaxLeaseExpiries). These are
// counted apart from the event's own failed sends, which the retry policy
// bounds, so that a crash-looping relay does not dead-letter the healthy
// events it held; the limit only stops an event that keeps killing relays.
func WithMaxLeaseExpiries(n int) Option { return func(c *config) { c.maxLeaseExpiries = n } }

// WithPublishTimeout bounds each confirmed send (default 15 s).
func WithPublishTimeout(d time.Duration) Option { return func(c *config) { c.publishTimeout = d } }

// WithDBTimeout bounds each database statement (default 15 s).
func WithDBTimeout(d time.Duration) Option { return func(c *config) { c.dbTimeout = d } }

// WithPollInterval sets the wait of an idle lane before it looks again
// (default 100 ms).
func WithPollInterval(d time.Duration) Option { return func(c *config) { c.pollInterval = d } }

// WithRetention sets how long SENT and COVERED rows are kept before cleanup
// deletes them (default 24 h). DEAD rows are kept until replayed.
func WithRetention(d time.Duration) Option { return func(c *config) { c.retention = d } }

// WithCleanupInterval sets how often Run deletes expired rows (default 1 min;
// negative disables cleanup in this process).
func WithCleanupInterval(d time.Duration) Option { return func(c *config) { c.cleanupInterval = d } }

// WithLagInterval sets how often Run measures the lag (age of the oldest
// pending event) of each target (default 10 s).
func WithLagInterval(d time.Duration) Option { return func(c *config) { c.lagInterval = d } }

// WithSynchronousCommit makes the relay's own bookkeeping (claims, sent
// marks) wait for the WAL flush on PostgreSQL. By default it does not: the
// relay's pool commits with synchronous_commit off, since losing its last
// commits in a database crash only gives claims back or makes events be sent
// again, both allowed by at-least-once delivery. Enqueue (the business
// transaction) is not affected either way.
func WithSynchronousCommit(on bool) Option { return func(c *config) { c.syncCommit = on } }

// WithWakeOnCommit says whether the lanes wake when events commit (Enqueue's
// wake-up, in this process or notified from another) or only at their poll
// (WithPollInterval). On by default. Off suits writers of many small commits
// whose per-key lanes would otherwise claim a few keys per wake-up: a poll
// claims what gathered in the interval, at less server time per event and up
// to one interval of latency (the route-passport pipeline's relay).
func WithWakeOnCommit(on bool) Option { return func(c *config) { c.noWake = !on } }

func newConfig(opts []Option) (config, error) {
	c := config{
		clock:            clock.Real{},
		logger:           slog.Default(),
		retry:            DefaultRetry(),
		lease:            DefaultLease,
		publishTimeout:   DefaultPublishTimeout,
		dbTimeout:        DefaultDBTimeout,
		pollInterval:     DefaultPollInterval,
		retention:        DefaultRetention,
		cleanupInterval:  DefaultCleanupInterval,
		lagInterval:      DefaultLagInterval,
		maxLeaseExpiries: DefaultMaxLeaseExpiries,
		wal:              defaultWALConfig(),
	}
	for _, o := range opts {
		o(&c)
	}
	if c.tracer != nil {
		for i, l := range c.lanes {
			if l.pub != nil {
				c.lanes[i].pub = &tracedPublisher{next: l.pub, tr: c.tracer, target: l.target}
			}
		}
	}
	var errs []error
	if len(c.lanes) == 0 {
		errs = append(errs, errors.New("no target configured"))
	}
	seen := map[string]bool{}
	for _, l := range c.lanes {
		switch {
		case l.target == "":
			errs = append(errs, errors.New("a target needs a name"))
		case seen[l.target]:
			errs = append(errs, fmt.Errorf("target %q configured twice", l.target))
		case l.pub == nil:
			errs = append(errs, fmt.Errorf("target %q has no publisher", l.target))
		case l.kind < Unordered || l.kind > Compacted:
			errs = append(errs, fmt.Errorf("target %q: unknown lane kind %d", l.target, l.kind))
		case l.batch < 1 || l.workers < 1 || l.flushLimit < 1 || l.flushPeriod <= 0:
			errs = append(errs, fmt.Errorf("target %q: batch, workers, flush limit and flush period must be positive", l.target))
		}
		seen[l.target] = true
	}
	if c.maxLeaseExpiries < 1 {
		errs = append(errs, errors.New("the lease expiry limit must be at least 1"))
	}
	if c.retry.MaxAttempts < 1 {
		errs = append(errs, errors.New("retry policy needs at least one attempt"))
	}
	if c.publishTimeout <= 0 || c.dbTimeout <= 0 || c.pollInterval <= 0 || c.lagInterval <= 0 || c.retention <= 0 {
		errs = append(errs, errors.New("timeouts, intervals and retention must be positive"))
	}
	if c.lease <= c.publishTimeout+2*c.dbTimeout {
		errs = append(errs, fmt.Errorf("lease %v must exceed the publish timeout plus two database timeouts (%v)", c.lease, c.publishTimeout+2*c.dbTimeout))
	}
	if c.clock == nil || c.logger == nil {
		errs = append(errs, errors.New("clock and logger must not be nil"))
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("outbox: relay configuration: %w", err)
	}
	return c, nil
}
