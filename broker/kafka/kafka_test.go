package kafka_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/msgx/msgx/broker/brokertest"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/broker/kafka"
)

// partitions per test topic: several, so load balancing and out-of-order
// completion across partitions are real.
const partitions = 4

// cluster is an in-process kfake cluster whose brokers are reached only
// through cuttable TCP proxies. kfake advertises its own listen addresses in
// metadata, so the drivers' dialer maps every broker address to its proxy:
// no driver connection can bypass a proxy, and cutting all proxies is a real
// outage.
type cluster struct {
	kf      *kfake.Cluster
	adm     *kadm.Client
	admCl   *kgo.Client
	proxies map[string]*brokertest.Proxy // broker address -> its proxy
	logger  *slog.Logger
}

func newCluster(t testing.TB) *cluster {
	t.Helper()
	kf, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	c := &cluster{kf: kf, proxies: map[string]*brokertest.Proxy{}, logger: testLogger()}
	for _, addr := range kf.ListenAddrs() {
		p, err := brokertest.NewProxy(addr)
		if err != nil {
			t.Fatalf("proxy: %v", err)
		}
		c.proxies[addr] = p
	}
	// The harness's own admin client talks to the brokers directly: an outage
	// is between the drivers and the cluster.
	c.admCl, err = kgo.NewClient(kgo.SeedBrokers(kf.ListenAddrs()...))
	if err != nil {
		t.Fatalf("admin client: %v", err)
	}
	c.adm = kadm.NewClient(c.admCl)
	t.Cleanup(func() {
		c.admCl.Close()
		for _, p := range c.proxies {
			_ = p.Close()
		}
		kf.Close()
	})
	return c
}

// testLogger logs warnings and errors; MSGX_KAFKA_TEST_LOG=debug|info shows
// the clients' group and connection activity when a case needs explaining.
func testLogger() *slog.Logger {
	level := slog.LevelWarn
	_ = level.UnmarshalText([]byte(os.Getenv("MSGX_KAFKA_TEST_LOG")))
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

func (c *cluster) dial(ctx context.Context, network, host string) (net.Conn, error) {
	p, ok := c.proxies[host]
	if !ok {
		return nil, fmt.Errorf("test dialer: no proxy for broker %s", host)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, p.Addr())
}

func (c *cluster) driver(opts ...kafka.Option) *kafka.Driver {
	return kafka.New(append([]kafka.Option{
		kafka.SeedBrokers(c.kf.ListenAddrs()...),
		kafka.WithDialer(c.dial),
		kafka.WithLogger(c.logger),
	}, opts...)...)
}

func (c *cluster) createTopic(ctx context.Context, name string, parts int32) error {
	resp, err := c.adm.CreateTopic(ctx, parts, -1, nil, name)
	if err != nil {
		return err
	}
	return resp.Err
}

type harness struct {
	c       *cluster
	refused string
}

func (h *harness) Name() string { return "kafka" }

func (h *harness) NewDriver(context.Context) (driver.Broker, error) { return h.c.driver(), nil }

func (h *harness) UnreachableDriver(context.Context) (driver.Broker, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		return nil, err
	}
	return kafka.New(kafka.SeedBrokers(addr), kafka.WithStartTimeout(5*time.Second), kafka.WithLogger(h.c.logger)), nil
}

func (h *harness) Outage(context.Context) (func(), error) {
	for _, p := range h.c.proxies {
		p.Cut()
	}
	return func() {
		for _, p := range h.c.proxies {
			p.Restore()
		}
	}, nil
}

// RefusedTopic is a topic that is never created; auto-creation is off, so a
// publish to it fails after the producer's unknown-topic retries.
func (h *harness) RefusedTopic() string { return h.refused }

func (h *harness) CreateTopic(ctx context.Context, name string) error {
	return h.c.createTopic(ctx, name, partitions)
}

func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func TestConformance(t *testing.T) {
	c := newCluster(t)
	brokertest.Run(t, &harness{c: c, refused: "refused-" + randomSuffix()}, brokertest.Options{})
}

func TestStartRefusesWeakDurability(t *testing.T) {
	c := newCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for name, opt := range map[string]kgo.Opt{
		"no idempotence": kgo.DisableIdempotentWrite(),
		"cancellation":   kgo.AllowIdempotentProduceCancellation(),
	} {
		d := c.driver(kafka.WithClientOptions(opt))
		if err := d.Start(ctx); err == nil {
			_ = d.Close(ctx)
			t.Errorf("%s: Start accepted a weakened producer", name)
		}
	}
	d := c.driver(kafka.WithClientOptions(kgo.DisableIdempotentWrite(), kgo.RequiredAcks(kgo.LeaderAck())), kafka.AllowWeakDurability())
	if err := d.Start(ctx); err != nil {
		t.Fatalf("Start with AllowWeakDurability: %v", err)
	}
	_ = d.Close(ctx)
}

func TestPublishToMissingTopicFailsInBoundedTime(t *testing.T) {
	c := newCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := c.driver()
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer d.Close(ctx)
	start := time.Now()
	err := d.Publish(ctx, "missing-"+randomSuffix(), []*driver.Message{{Payload: []byte("x")}})
	if err == nil {
		t.Fatal("publish to a missing topic succeeded")
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("publish to a missing topic only failed by the caller's deadline: %v", err)
	}
	t.Logf("failed after %v: %v", time.Since(start), err)
}
