package kafka

import (
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/msgx/msgx/broker/brokers"
	"github.com/msgx/msgx/broker/driver"
)

// Kind is the kind of a Kafka broker block.
const Kind = "kafka"

// Adapter is the Kafka adapter for a brokers.Registry.
func Adapter() brokers.Adapter {
	return brokers.Adapter{Kind: Kind, New: func() brokers.Config { return &Config{} }}
}

// DefaultSeed is the seed broker of a block that gives none.
const DefaultSeed = "127.0.0.1:9092"

// Config is a Kafka broker block of the service's configuration.
type Config struct {
	// Seeds are the seed brokers (host:port).
	Seeds []string `yaml:"seeds"`
	// Acks is the producer's acks: all (default), leader or none.
	Acks string `yaml:"acks"`
	// Idempotence is the producer's idempotent write (default true).
	Idempotence *bool  `yaml:"idempotence"`
	ClientID    string `yaml:"client-id"`
	// SessionTimeout is how long a consumer group keeps a member that
	// stopped heartbeating (static members keep their partitions through a
	// restart shorter than it); 0: the adapter's default.
	SessionTimeout time.Duration `yaml:"session-timeout"`
	// MaxMessageBytes is the producer's limit on a record batch (default
	// DefaultMaxMessageBytes, Kafka's message.max.bytes).
	MaxMessageBytes int32 `yaml:"max-message-bytes"`
	// CompactedTopics are topics created at start when missing, with
	// cleanup.policy=compact.
	CompactedTopics []string `yaml:"compacted-topics"`
	// TLS and SASL secure the connections.
	TLS  brokers.TLS `yaml:"tls"`
	SASL SASL        `yaml:"sasl"`
}

// SASL is the SASL authentication of the connections.
type SASL struct {
	// Mechanism is plain, scram-sha-256 or scram-sha-512 (empty: no SASL).
	Mechanism string `yaml:"mechanism"`
	User      string `yaml:"user"`
	// Password: set it from the environment (MSGX_BROKERS_NAME_SASL_PASSWORD).
	Password string `yaml:"password"`
}

// SetDefaults implements brokers.Config.
func (c *Config) SetDefaults() {
	if c.Acks == "" {
		c.Acks = "all"
	}
	if c.Idempotence == nil {
		on := true
		c.Idempotence = &on
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if len(c.Seeds) == 0 {
		c.Seeds = []string{DefaultSeed}
	}
}

// Validate implements brokers.Config.
func (c *Config) Validate(chk *brokers.Check) {
	if !slices.Contains([]string{"all", "leader", "none"}, c.Acks) {
		chk.Addf("acks", "%q is not an acks setting (all, leader or none)", c.Acks)
	} else if chk.Production && c.Acks != "all" {
		chk.Addf("acks", "the production profile refuses Kafka producers without acks=all (got %s): a leader failure would lose confirmed events", c.Acks)
	}
	if chk.Production && c.Idempotence != nil && !*c.Idempotence {
		chk.Addf("idempotence", "the production profile refuses Kafka producers without idempotence: retries could duplicate or reorder events of a key")
	}
	if len(c.Seeds) == 0 {
		chk.Addf("seeds", "missing: at least one host:port")
	}
	for _, s := range c.Seeds {
		if _, _, err := net.SplitHostPort(s); err != nil {
			chk.Addf("seeds", "%q is not host:port", s)
		}
	}
	if c.MaxMessageBytes < 1<<10 || c.MaxMessageBytes > 1<<30 {
		chk.Addf("max-message-bytes", "%d: must be between 1024 and 1073741824 (franz-go's bounds); set it to the smallest max.message.bytes of the topics msgx sends to (Kafka's default: 1048588)", c.MaxMessageBytes)
	}
	if c.SessionTimeout != 0 && (c.SessionTimeout < time.Second || c.SessionTimeout > 30*time.Minute) {
		chk.Addf("session-timeout", "must be between 1s and 30m (the broker also bounds it, by default to 6s–30m)")
	}
	c.TLS.Validate(chk, "tls")
	s := c.SASL
	switch s.Mechanism {
	case "":
		if s.User != "" || s.Password != "" {
			chk.Addf("sasl.mechanism", "missing: user and password need a mechanism (plain, scram-sha-256 or scram-sha-512)")
		}
		return
	case "plain", "scram-sha-256", "scram-sha-512":
	default:
		chk.Addf("sasl.mechanism", "%q is not a SASL mechanism (plain, scram-sha-256 or scram-sha-512)", s.Mechanism)
	}
	if s.User == "" {
		chk.Addf("sasl.user", "missing")
	}
	if s.Password == "" {
		chk.Addf("sasl.password", "missing (%s)", chk.Env("sasl.password"))
	}
	if chk.Production && s.Mechanism == "plain" && !c.TLS.On() {
		chk.Addf("sasl.mechanism", "the production profile refuses SASL PLAIN without TLS: the password would cross the network in clear")
	}
}

// StartHint implements brokers.StartHinter: a refused SASL login shows as a
// closed connection.
func (c *Config) StartHint() string {
	if c.SASL.Mechanism == "" {
		return ""
	}
	return fmt.Sprintf(" (SASL %s as %q: a wrong user or password also ends so)", c.SASL.Mechanism, c.SASL.User)
}

// Driver implements brokers.Config. The instance id gives the consumer
// groups static membership.
func (c *Config) Driver(e brokers.Env) (driver.Broker, error) {
	opts, weak := c.producerOptions()
	sec, err := c.security(e)
	if err != nil {
		return nil, err
	}
	opts = append(opts, sec...)
	kopts := []Option{SeedBrokers(c.Seeds...), WithClientOptions(opts...), WithInstanceID(e.InstanceID),
		WithSessionTimeout(c.SessionTimeout), WithMaxMessageBytes(c.MaxMessageBytes)}
	if e.Logger != nil {
		kopts = append(kopts, WithLogger(e.Logger))
	}
	for _, topic := range c.CompactedTopics {
		kopts = append(kopts, WithTopic(topic, -1, map[string]string{"cleanup.policy": "compact"}))
	}
	if weak {
		// Only the embedded profile gets here (validation refuses it in production).
		kopts = append(kopts, AllowWeakDurability())
	}
	return New(kopts...), nil
}

// producerOptions are the client options of acks, idempotence and the
// client id; weak is whether they give up acks=all or idempotence.
func (c *Config) producerOptions() (opts []kgo.Opt, weak bool) {
	if c.ClientID != "" {
		opts = append(opts, kgo.ClientID(c.ClientID))
	}
	switch c.Acks {
	case "leader":
		opts, weak = append(opts, kgo.RequiredAcks(kgo.LeaderAck())), true
	case "none":
		opts, weak = append(opts, kgo.RequiredAcks(kgo.NoAck())), true
	}
	// franz-go's idempotent producer needs acks=all.
	if weak || (c.Idempotence != nil && !*c.Idempotence) {
		opts, weak = append(opts, kgo.DisableIdempotentWrite()), true
	}
	return opts, weak
}

// security is the client options of TLS and SASL.
func (c *Config) security(e brokers.Env) ([]kgo.Opt, error) {
	var opts []kgo.Opt
	tc, err := c.TLS.Config(e.Logger)
	if err != nil {
		return nil, fmt.Errorf("kafka: tls.%w", err)
	}
	if tc != nil {
		// franz-go sets ServerName per broker from the address it dials
		// when the block gives none.
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	s := c.SASL
	switch s.Mechanism {
	case "":
	case "plain":
		opts = append(opts, kgo.SASL(plain.Auth{User: s.User, Pass: s.Password}.AsMechanism()))
	case "scram-sha-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: s.User, Pass: s.Password}.AsSha256Mechanism()))
	case "scram-sha-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: s.User, Pass: s.Password}.AsSha512Mechanism()))
	default:
		return nil, fmt.Errorf("kafka: sasl.mechanism %q: not plain, scram-sha-256 or scram-sha-512", s.Mechanism)
	}
	return opts, nil
}
