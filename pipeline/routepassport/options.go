package routepassport

import (
	"log/slog"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/pipeline/routepassport/geowkt"
)

// The topics of the seed, the defaults of the options.
const (
	InputTopic        = "pcp.request.survey-georeference.v1"
	DeadLetterTopic   = "pcp.request.survey-georeference-dlq.v1"
	RouteInTopic      = "pcp.route.in.v1"
	GeoreferenceTopic = "pcp.route.georeference.v1"
	DefaultGroup      = "pcp-route-processing-service"

	// Outbox targets (Event.Target) of the two output topics.
	RouteInTarget      = "route-passport:in"
	GeoreferenceTarget = "route-passport:georeference"
)

// DefaultRetry is the retry of transient failures (database down, dead-letter
// topic unreachable): 100 ms doubling to 10 s, 20% jitter, for as long as the
// pipeline runs. The delivery stays unsettled meanwhile, so the offset is not
// committed and nothing is lost; every failed attempt is logged and counted.
func DefaultRetry() backoff.Policy {
	return backoff.Policy{Initial: 100 * time.Millisecond, Max: 10 * time.Second, Jitter: 0.2}
}

type config struct {
	inputTopic, dlqTopic, inTopic, georefTopic, group string
	logger                                            *slog.Logger
	registerer                                        prometheus.Registerer
	clock                                             clock.Clock
	retry                                             backoff.Policy
	dbTimeout                                         time.Duration
	batchSize, concurrency, ingestWorkers             int
	parseWorkers                                      int
	maxRecordBytes                                    int
	limits                                            geowkt.Limits
	relay                                             bool
	relayOptions                                      []outbox.Option
	walDSN                                            string // wal.go
	testController                                    bool
	sourceRetention                                   time.Duration
	cleanupInterval                                   time.Duration
	stopTimeout                                       time.Duration
	// stuckAfter, stuckFailures: when the pipeline counts as stuck (Check).
	stuckAfter    time.Duration
	stuckFailures int
}

// Option configures a Pipeline.
type Option func(*config)

func defaults() config {
	return config{
		inputTopic: InputTopic, dlqTopic: DeadLetterTopic, inTopic: RouteInTopic, georefTopic: GeoreferenceTopic,
		group: DefaultGroup, logger: slog.Default(), clock: clock.Real{}, retry: DefaultRetry(),
		dbTimeout: 15 * time.Second, batchSize: 200, ingestWorkers: 4, parseWorkers: runtime.GOMAXPROCS(0), concurrency: 4, maxRecordBytes: DefaultMaxRecordBytes,
		relay: true, sourceRetention: 7 * 24 * time.Hour, cleanupInterval: 10 * time.Minute, stopTimeout: 30 * time.Second,
		stuckAfter: 5 * time.Minute, stuckFailures: 10,
	}
}

// WithTopics sets the input, dead-letter and the two output topics (defaults
// are the constants of this package).
func WithTopics(input, deadLetter, routeIn, georeference string) Option {
	return func(c *config) {
		c.inputTopic, c.dlqTopic, c.inTopic, c.georefTopic = input, deadLetter, routeIn, georeference
	}
}

// WithGroup sets the consumer group (default DefaultGroup). Instances in one
// group share the input's partitions.
func WithGroup(g string) Option { return func(c *config) { c.group = g } }

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithRegisterer registers the pipeline's counters (default: not registered).
func WithRegisterer(r prometheus.Registerer) Option { return func(c *config) { c.registerer = r } }

// WithClock sets the host clock of retry waits, stamps and the relay (default
// the wall clock); the relay judges its leases and retries on the database's
// clock, corrected from this one (outbox.WithClock).
func WithClock(cl clock.Clock) Option { return func(c *config) { c.clock = cl } }

// WithRetry sets the backoff of transient failures (default DefaultRetry;
// MaxAttempts is ignored: transient failures are retried until Run ends).
func WithRetry(p backoff.Policy) Option { return func(c *config) { c.retry = p } }

// WithStuckAfter sets when the pipeline counts as stuck on a record (Check
// fails, naming it): its oldest unacknowledged record is older than age
// (default 5 min), or a record has failed failures times in a row with a
// transient error (default 10: about 30 s of DefaultRetry).
func WithStuckAfter(age time.Duration, failures int) Option {
	return func(c *config) { c.stuckAfter, c.stuckFailures = age, failures }
}

// WithDBTimeout bounds one ingestion transaction (default 15 s).
func WithDBTimeout(d time.Duration) Option { return func(c *config) { c.dbTimeout = d } }

// WithBatchSize sets how many records one transaction may hold on brokers
// with batch delivery (default 200; 1 disables batching).
func WithBatchSize(n int) Option { return func(c *config) { c.batchSize = n } }

// WithIngestWorkers sets how many transactions store the parts of one batch
// at once (default 4). A batch is split by routeId, so a route's records stay
// in order in one transaction.
func WithIngestWorkers(n int) Option { return func(c *config) { c.ingestWorkers = n } }

// WithParseWorkers sets how many goroutines parse the records of one batch
// at once (default GOMAXPROCS); a batch is stored only once it is parsed.
func WithParseWorkers(n int) Option { return func(c *config) { c.parseWorkers = n } }

// WithConcurrency sets the handlers running at once when batches are not
// used (default 4; records with one key are always handled in order).
func WithConcurrency(n int) Option { return func(c *config) { c.concurrency = n } }

// WithMaxRecordBytes bounds an input record (default DefaultMaxRecordBytes);
// larger records are contract errors (class size). New refuses a limit that
// leaves less than DeadLetterRoom under the broker's message limit.
func WithMaxRecordBytes(n int) Option { return func(c *config) { c.maxRecordBytes = n } }

// WithGeometryLimits bounds a geometry's nesting and positions.
func WithGeometryLimits(l geowkt.Limits) Option { return func(c *config) { c.limits = l } }

// WithRelay says whether Run also relays the pipeline's outbox events
// (default true). Turn it off when one relay of the service relays every
// target; give it RelayTargets then.
func WithRelay(on bool) Option { return func(c *config) { c.relay = on } }

// WithRelayOptions passes options (lease, poll interval, retry...) to the
// relay Run starts.
func WithRelayOptions(opts ...outbox.Option) Option {
	return func(c *config) { c.relayOptions = append(c.relayOptions, opts...) }
}

// WithTestController enables the test controller
// (route-processing.test-controller.enabled; default false).
func WithTestController(enabled bool) Option { return func(c *config) { c.testController = enabled } }

// WithSourceRetention sets how long the identities of ingested records are
// kept for redelivery detection (default 7 days, Kafka's default retention).
func WithSourceRetention(d time.Duration) Option { return func(c *config) { c.sourceRetention = d } }

// WithStopTimeout bounds how long Run waits for in-flight records when its
// context ends (default 30 s); records still unfinished are redelivered.
func WithStopTimeout(d time.Duration) Option { return func(c *config) { c.stopTimeout = d } }
