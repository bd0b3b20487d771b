// Package brokertest is the conformance suite (TCK) every broker adapter must
// pass. An adapter's test builds a Harness for a real broker and calls Run; a
// case is skipped only when the adapter's declared Capabilities say it does
// not apply.
package brokertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/broker/driver"
)

// Harness connects the suite to one adapter and a real broker.
type Harness interface {
	// Name is the adapter's name in the matrix ("kafka", "rabbitmq", ...).
	Name() string
	// NewDriver returns a new, unstarted driver connected to the broker under
	// test through a path the harness can cut (see Outage).
	NewDriver(ctx context.Context) (driver.Broker, error)
	// UnreachableDriver returns an unstarted driver aimed at an address where no
	// broker listens: its Start must fail.
	UnreachableDriver(ctx context.Context) (driver.Broker, error)
	// Outage really cuts every connection between drivers and the broker (by
	// restarting the broker or cutting a TCP proxy) and refuses new ones until
	// restore is called.
	Outage(ctx context.Context) (restore func(), err error)
	// RefusedTopic names a destination the broker refuses publishes to.
	// Subscribing with it as the dead-letter topic must still succeed; only the
	// dead-letter publish fails.
	RefusedTopic() string
	// MaxMessageBytes is the size limit drivers from NewDriver work under:
	// a message whose payload alone is larger must be refused as Rejected.
	MaxMessageBytes() int
}

// Network is implemented by harnesses whose drivers reach the broker over a
// network path the harness controls (a Proxy): the suite then also checks
// what a network does short of closing connections.
type Network interface {
	// Stall makes every connection between drivers and the broker silent,
	// closing nothing (a half-open network), until resume is called.
	Stall(ctx context.Context) (resume func(), err error)
	// Latency delays every byte between drivers and the broker by d until
	// restore is called.
	Latency(ctx context.Context, d time.Duration) (restore func(), err error)
}

// ProxyNetwork implements Network over proxies.
type ProxyNetwork []*Proxy

// Stall implements Network.
func (ps ProxyNetwork) Stall(context.Context) (func(), error) {
	for _, p := range ps {
		p.Stall()
	}
	return func() {
		for _, p := range ps {
			p.Resume()
		}
	}, nil
}

// Latency implements Network.
func (ps ProxyNetwork) Latency(_ context.Context, d time.Duration) (func(), error) {
	for _, p := range ps {
		p.SetLatency(d)
	}
	return func() {
		for _, p := range ps {
			p.SetLatency(0)
		}
	}, nil
}

// Targeted is implemented by harnesses that say what the suite runs against
// (a local server, an in-process double); the matrix shows it.
type Targeted interface {
	Target() string
}

// ExpiryChecker is implemented by harnesses of adapters that declare
// SubscriptionExpiry: it tells whether the broker still holds a subscription.
type ExpiryChecker interface {
	SubscriptionExists(ctx context.Context, spec driver.SubscriptionSpec) (bool, error)
}

// Topics is implemented by harnesses whose broker needs a destination created
// before it is used (for example a Kafka topic with a chosen partition count).
type Topics interface {
	CreateTopic(ctx context.Context, name string) error
}

// timeout is how long the suite waits for any one condition. MSGX_TCK_TIMEOUT
// (a Go duration) raises it on a slow machine.
func timeout() time.Duration {
	if s := os.Getenv("MSGX_TCK_TIMEOUT"); s != "" {
		if d, err := time.ParseDuration(s); err == nil {
			return d
		}
	}
	return 30 * time.Second
}

// uniqueName returns a fresh name per run so cases never see each other's messages.
func uniqueName(t testing.TB, parts ...string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.ToLower(strings.Join(append([]string{"tck"}, parts...), "-")) + "-" + hex.EncodeToString(b[:])
	return strings.NewReplacer("/", "-", " ", "-", "_", "-").Replace(name)
}
