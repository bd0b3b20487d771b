package nats

import (
	"log/slog"
	"time"

	natsio "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

type options struct {
	url            string
	name           string
	natsOpts       []natsio.Option
	logger         *slog.Logger
	connectTimeout time.Duration
	reconnectWait  time.Duration
	requestTimeout time.Duration

	subjectPrefix string
	retention     jetstream.RetentionPolicy
	streamConfig  func(*jetstream.StreamConfig)
	deadLetters   bool
	deadLetterAge time.Duration
	topicAge      time.Duration
	ackWait       time.Duration
	maxHold       time.Duration
	maxDeliver    int
	maxAckPending int
	groupInactive time.Duration
	ackSync       bool
	pullExpiry    time.Duration
	publishWindow int
	errorsBuffer  int
}

func defaults() options {
	return options{
		url:            natsio.DefaultURL,
		name:           "msgx",
		logger:         slog.Default(),
		connectTimeout: 5 * time.Second,
		reconnectWait:  time.Second,
		requestTimeout: 10 * time.Second,
		subjectPrefix:  "msgx",
		retention:      jetstream.LimitsPolicy,
		topicAge:       7 * 24 * time.Hour,
		deadLetters:    true,
		deadLetterAge:  14 * 24 * time.Hour,
		ackWait:        30 * time.Second,
		maxHold:        5 * time.Minute,
		maxDeliver:     -1,
		maxAckPending:  1000,
		pullExpiry:     10 * time.Second,
		publishWindow:  1000,
		errorsBuffer:   64,
	}
}

// Option configures a Driver.
type Option func(*options)

// WithURL sets the server URL(s), comma separated (default nats://127.0.0.1:4222).
// The client connects only to these: servers the cluster advertises are ignored.
func WithURL(url string) Option { return func(o *options) { o.url = url } }

// WithClientName sets the connection name shown by the server (default "msgx").
func WithClientName(name string) Option { return func(o *options) { o.name = name } }

// WithNATSOptions appends nats.go connection options (credentials, TLS, ...).
// They are applied after the driver's own, so they may override them.
func WithNATSOptions(opts ...natsio.Option) Option {
	return func(o *options) { o.natsOpts = append(o.natsOpts, opts...) }
}

// WithLogger sets the logger for connection state changes (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithConnectTimeout bounds the initial connection in Start (default 5 s).
func WithConnectTimeout(d time.Duration) Option { return func(o *options) { o.connectTimeout = d } }

// WithReconnectWait sets the pause between reconnect attempts (default 1 s).
// The client reconnects forever; every failed attempt is reported on Errors.
func WithReconnectWait(d time.Duration) Option { return func(o *options) { o.reconnectWait = d } }

// WithRequestTimeout bounds JetStream API calls and publish acknowledgements
// when the caller's context has no deadline (default 10 s).
func WithRequestTimeout(d time.Duration) Option { return func(o *options) { o.requestTimeout = d } }

// WithSubjectPrefix sets the subject namespace: topic T is published on
// subject "<prefix>.T" and stored in the stream named after that subject
// (default "msgx").
func WithSubjectPrefix(p string) Option { return func(o *options) { o.subjectPrefix = p } }

// WithRetention sets the retention of the topic streams the driver creates
// (default jetstream.LimitsPolicy: messages are kept until the stream's limits
// remove them, whoever has read them, so a confirmed publish is kept for a
// group that subscribes later, as on Kafka; see WithTopicMaxAge).
// jetstream.InterestPolicy keeps a message only until every group that
// existed when it was published acknowledged it: a message published before
// any group exists is confirmed and then dropped. jetstream.WorkQueuePolicy
// removes a message at its first acknowledgement and allows only one group
// per topic, so the driver then declares no Broadcast.
func WithRetention(r jetstream.RetentionPolicy) Option { return func(o *options) { o.retention = r } }

// WithStreamConfig adjusts every stream the driver creates (replicas, limits,
// compression, ...) after the driver filled in name, subject, storage and
// retention. Existing streams are used as they are and never updated.
func WithStreamConfig(f func(*jetstream.StreamConfig)) Option {
	return func(o *options) { o.streamConfig = f }
}

// WithDeadLetterStreams makes Subscribe create the stream of the
// subscription's dead-letter topic when it does not exist (default true), with
// limits retention so that dead letters are kept even before anyone reads
// them. When false, dead-letter topics must exist (EnsureTopic, or a reader
// subscribed to them); a dead letter to a topic without a stream fails and
// leaves the message unsettled.
func WithDeadLetterStreams(on bool) Option { return func(o *options) { o.deadLetters = on } }

// WithTopicMaxAge bounds how long topic streams the driver creates keep
// messages under limits retention (default 7 days; 0 keeps them until other
// limits set with WithStreamConfig remove them).
func WithTopicMaxAge(d time.Duration) Option { return func(o *options) { o.topicAge = d } }

// WithDeadLetterMaxAge bounds how long dead-letter streams the driver creates
// keep messages (default 14 days; 0 keeps them until removed by hand).
func WithDeadLetterMaxAge(d time.Duration) Option { return func(o *options) { o.deadLetterAge = d } }

// WithAckWait sets the consumers' ack wait (default 30 s): a delivery neither
// settled nor kept alive for that long is redelivered. The driver keeps
// unsettled deliveries alive (in-progress acknowledgements) while their
// subscription is open, up to WithMaxHold, so this is also how long a crashed
// or closed consumer's unsettled messages wait before redelivery.
func WithAckWait(d time.Duration) Option { return func(o *options) { o.ackWait = d } }

// WithMaxHold bounds how long the driver keeps an unsettled delivery alive
// while its subscription is open (default 5 min). A handler that runs longer,
// or a delivery left unsettled (cancelled handler), is redelivered after
// MaxHold plus AckWait.
func WithMaxHold(d time.Duration) Option { return func(o *options) { o.maxHold = d } }

// WithMaxDeliver sets the consumers' MaxDeliver as a backstop (default -1,
// unlimited): the port decides exhaustion from the redelivery count and
// dead-letters the message itself; the server stops delivering a message after
// MaxDeliver deliveries whatever happened to them.
func WithMaxDeliver(n int) Option { return func(o *options) { o.maxDeliver = n } }

// WithMaxAckPending bounds the unacknowledged messages of a group across all
// its instances (default 1000).
func WithMaxAckPending(n int) Option { return func(o *options) { o.maxAckPending = n } }

// WithGroupInactiveThreshold makes the server delete a group's consumer after
// it has had no instance for d (default 0: groups live until deleted by hand).
// While a group exists, interest streams keep every message for it.
func WithGroupInactiveThreshold(d time.Duration) Option {
	return func(o *options) { o.groupInactive = d }
}

// WithAckSync makes Ack wait for the server's confirmation of the
// acknowledgement (a double ack; default false). It closes the small window in
// which an acknowledged message is redelivered because the acknowledgement was
// lost with the connection, at the cost of one round trip per message.
func WithAckSync(on bool) Option { return func(o *options) { o.ackSync = on } }

// WithPullExpiry sets how long one pull request waits at the server (default
// 10 s). Pull requests carry an idle heartbeat of a fifth of it, so a pull lost
// with a broken connection is replaced within two heartbeats.
func WithPullExpiry(d time.Duration) Option { return func(o *options) { o.pullExpiry = d } }
