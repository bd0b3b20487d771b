package pulsar_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/msgx/msgx/broker/brokertest"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/broker/pulsar"
	"github.com/msgx/msgx/broker/pulsar/pulsarfake"
	"github.com/msgx/msgx/internal/testkit"
)

// harness runs the suite through a TCP proxy so that Outage really cuts every
// client connection.
type harness struct {
	name    string
	target  string
	proxy   *brokertest.Proxy
	refused string
	opts    []pulsar.Option
}

func (h *harness) Name() string { return h.name }

func (h *harness) Target() string { return h.target }

func (h *harness) NewDriver(context.Context) (driver.Broker, error) {
	opts := append([]pulsar.Option{pulsar.WithLogger(testkit.Quiet()), pulsar.WithHealthInterval(time.Second)}, h.opts...)
	return pulsar.New("pulsar://"+h.proxy.Addr(), opts...), nil
}

func (h *harness) UnreachableDriver(context.Context) (driver.Broker, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there any more
	return pulsar.New("pulsar://"+addr, pulsar.WithLogger(testkit.Quiet())), nil
}

func (h *harness) Stall(ctx context.Context) (func(), error) {
	return brokertest.ProxyNetwork{h.proxy}.Stall(ctx)
}

func (h *harness) Latency(ctx context.Context, d time.Duration) (func(), error) {
	return brokertest.ProxyNetwork{h.proxy}.Latency(ctx, d)
}

func (h *harness) Outage(context.Context) (func(), error) {
	h.proxy.Cut()
	return h.proxy.Restore, nil
}

func (h *harness) RefusedTopic() string { return h.refused }

// MaxMessageBytes is the adapter's default limit, Pulsar's default
// maxMessageSize.
func (h *harness) MaxMessageBytes() int { return pulsar.DefaultMaxMessageBytes }

func refusedTopic() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	// A tenant that does not exist: a real broker refuses it, the fake is told to.
	return "persistent://msgx-refused/none/refused-" + hex.EncodeToString(b[:])
}

// TestConformance runs the suite against the in-process fake broker with the
// default Shared subscriptions.
func TestConformance(t *testing.T) { runFake(t, "pulsar") }

// TestConformanceKeyShared runs it with Key_Shared subscriptions, which declare
// per-key order.
func TestConformanceKeyShared(t *testing.T) {
	runFake(t, "pulsar-key-shared", pulsar.WithSubscriptionType(pulsar.KeyShared))
}

// TestConformanceFailover runs it with Failover subscriptions: one active
// consumer per group, per-key order, no load balancing.
func TestConformanceFailover(t *testing.T) {
	runFake(t, "pulsar-failover", pulsar.WithSubscriptionType(pulsar.Failover))
}

func runFake(t *testing.T, name string, opts ...pulsar.Option) {
	srv, err := pulsarfake.New(pulsarfake.WithLogger(testkit.Quiet()))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	proxy, err := brokertest.NewProxy(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	// Lookups send clients to the proxy, so every connection can be cut.
	srv.Advertise(proxy.Addr())
	h := &harness{name: name, target: "pulsarfake, in-process wire double", proxy: proxy, refused: refusedTopic(), opts: opts}
	srv.Refuse(h.refused)
	brokertest.Run(t, h, brokertest.Options{})
}

// TestConformanceRealPulsar runs the same suite against the Pulsar at
// MSGX_PULSAR_URL, through a TCP proxy. The proxy carries every connection only
// when topic lookups keep clients on the service URL, as they do behind a Pulsar
// proxy; a bare broker sends them to its advertised address instead.
func TestConformanceRealPulsar(t *testing.T) {
	raw := os.Getenv("MSGX_PULSAR_URL")
	if raw == "" {
		t.Skip("needs MSGX_PULSAR_URL (for example pulsar://127.0.0.1:6650) to run the suite against a real Pulsar")
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("MSGX_PULSAR_URL: %v", err)
	}
	proxy, err := brokertest.NewProxy(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	brokertest.Run(t, &harness{name: "pulsar", target: "Pulsar at MSGX_PULSAR_URL", proxy: proxy, refused: refusedTopic()}, brokertest.Options{})
}
