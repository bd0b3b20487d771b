package kafka

import (
	"context"
	"log/slog"
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Option configures a Driver.
type Option func(*config)

type config struct {
	seeds          []string
	dialer         func(ctx context.Context, network, host string) (net.Conn, error)
	logger         *slog.Logger
	commitInterval time.Duration
	commitTimeout  time.Duration
	revokeTimeout  time.Duration
	startTimeout   time.Duration
	unknownRetries int
	linger         time.Duration
	fetchMaxWait   time.Duration
	maxMsgBytes    int32 // WithMaxMessageBytes
	weakDurability bool
	instanceID     string
	sessionTimeout time.Duration
	clientOpts     []kgo.Opt
	topics         []topicSpec
}

// Defaults the benchmark's raw client shares with the driver.
const (
	DefaultCommitInterval = 5 * time.Second
	DefaultFetchMaxWait   = 500 * time.Millisecond
)

func defaultConfig() config {
	return config{
		seeds:          []string{"127.0.0.1:9092"},
		logger:         slog.Default(),
		commitInterval: DefaultCommitInterval,
		commitTimeout:  10 * time.Second,
		revokeTimeout:  10 * time.Second,
		startTimeout:   10 * time.Second,
		unknownRetries: 4,
		linger:         0,
		fetchMaxWait:   DefaultFetchMaxWait,
		maxMsgBytes:    DefaultMaxMessageBytes,
	}
}

// SeedBrokers sets the brokers the client first contacts (default
// 127.0.0.1:9092). The rest of the cluster is discovered from metadata.
func SeedBrokers(addrs ...string) Option {
	return func(c *config) { c.seeds = append([]string(nil), addrs...) }
}

// WithDialer makes every broker connection go through fn (TLS, a SOCKS proxy,
// or a test proxy that can cut connections). Brokers are dialled at the
// addresses they advertise in metadata, so fn sees those addresses.
func WithDialer(fn func(ctx context.Context, network, host string) (net.Conn, error)) Option {
	return func(c *config) { c.dialer = fn }
}

// WithLogger sets the logger of the driver and of its franz-go clients
// (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithCommitInterval sets how often settled offsets are committed (default
// 5 s, Kafka's auto.commit.interval.ms). Offsets are also committed when
// partitions are revoked and when a subscription closes; a shorter interval
// only narrows the redelivery window after a crash.
func WithCommitInterval(d time.Duration) Option { return func(c *config) { c.commitInterval = d } }

// WithCommitTimeout bounds each offset commit (default 10 s).
func WithCommitTimeout(d time.Duration) Option { return func(c *config) { c.commitTimeout = d } }

// WithRevokeTimeout bounds how long a rebalance waits for in-flight handlers
// of the partitions it takes away before committing what they settled
// (default 10 s). It must stay well below the group's rebalance timeout
// (franz-go default 60 s). Deliveries still unsettled then are redelivered to
// the partitions' new owner.
func WithRevokeTimeout(d time.Duration) Option { return func(c *config) { c.revokeTimeout = d } }

// WithStartTimeout bounds the reachability check Start makes (default 10 s).
func WithStartTimeout(d time.Duration) Option { return func(c *config) { c.startTimeout = d } }

// WithUnknownTopicRetries sets how many metadata answers saying a topic does
// not exist a publish tolerates before failing (default 4, franz-go's
// default). Topics are not auto-created unless kgo.AllowAutoTopicCreation is
// passed through WithClientOptions, so publishing to a missing topic fails
// within a bounded time.
func WithUnknownTopicRetries(n int) Option { return func(c *config) { c.unknownRetries = n } }

// WithLinger sets how long the producer waits for more records before
// sending a batch (default 0: Publish is synchronous, so lingering would only
// add latency to every confirmed publish; concurrent publishers still share
// requests while one is in flight).
func WithLinger(d time.Duration) Option { return func(c *config) { c.linger = d } }

// WithFetchMaxWait sets how long a broker may hold a fetch open waiting for
// new records (default 500 ms, the Java client's fetch.max.wait.ms). A
// partition whose start offset is resolved while a fetch is open is only
// fetched once that fetch returns, so this also bounds the delay before a
// newly assigned partition is consumed.
func WithFetchMaxWait(d time.Duration) Option { return func(c *config) { c.fetchMaxWait = d } }

// WithClientOptions passes franz-go options to every client the driver
// creates (TLS, SASL, client id, fetch sizes, ...). Options that weaken the
// producer's acks=all and idempotence are refused at Start unless
// AllowWeakDurability is also given. Options the driver's correctness depends
// on (consumer group, manual commits, rebalance callbacks) are always set by
// the driver after these.
func WithClientOptions(opts ...kgo.Opt) Option {
	return func(c *config) { c.clientOpts = append(c.clientOpts, opts...) }
}

// AllowWeakDurability permits client options that weaken publish durability
// (acks other than all, idempotence disabled, idempotent produce
// cancellation). Without it Start refuses them.
func AllowWeakDurability() Option { return func(c *config) { c.weakDurability = true } }

// WithInstanceID makes every consumer group member of the driver a static
// member (KIP-345) whose group.instance.id derives from id (default: none,
// dynamic members). A restarted process with the same id takes back its
// members' partitions at once instead of waiting for the session timeout of
// its dead members to expire and the group to rebalance. Two live processes
// must never share an id: the newer one fences the older one out of the
// group. A static member does not leave the group when it closes, so the
// partitions of a process that stops for good wait for its session timeout
// (see WithSessionTimeout) before another member gets them.
//
// The id must be made of ASCII letters, digits, '.', '_' and '-' (Kafka's
// rule for instance ids); each subscription's member adds its topic to it
// ("<id>.<topic>", and "-2", "-3", … for further subscriptions of the same
// topic and group in one process), so one id serves every group of a process.
func WithInstanceID(id string) Option { return func(c *config) { c.instanceID = id } }

// WithSessionTimeout sets the consumer group session timeout (default 0:
// the client's, 45 s): how long the group keeps a member that stopped
// heartbeating before it gives its partitions to others. The heartbeat
// interval is a third of it at most. The broker bounds it
// (group.min.session.timeout.ms, 6 s by default, to
// group.max.session.timeout.ms, 30 min).
func WithSessionTimeout(d time.Duration) Option { return func(c *config) { c.sessionTimeout = d } }
