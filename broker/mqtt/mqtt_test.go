package mqtt_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"testing"
	"time"

	"github.com/msgx/msgx/broker/brokertest"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/broker/mqtt"
)

// brokerAddr is the local Mosquitto (MQTT 5); MSGX_MQTT_ADDR overrides it.
func brokerAddr() string {
	if a := os.Getenv("MSGX_MQTT_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:1883"
}

// harness runs the TCK against Mosquitto through a proxy it can cut. Every
// driver of a run shares one instance id and one slot registry, as the
// consumers of one process would: a driver started after another one stopped
// takes over the sessions of its groups.
type harness struct {
	proxy    *brokertest.Proxy
	instance string
	slots    *mqtt.Slots
}

func (h *harness) Name() string { return "mqtt" }

func (h *harness) Target() string { return "local Mosquitto" }

func (h *harness) NewDriver(context.Context) (driver.Broker, error) {
	return mqtt.New(h.proxy.Addr(),
		mqtt.WithInstanceID(h.instance),
		mqtt.WithSlots(h.slots),
		// Sessions outlive the run only briefly on the shared broker.
		mqtt.WithSessionExpiry(5*time.Minute),
		mqtt.WithDeadLetterExpiry(5*time.Minute),
		mqtt.WithReconnectBackoff(50*time.Millisecond, time.Second),
		mqtt.WithMaxPacketSize(tckMaxMessageBytes),
	)
}

func (h *harness) UnreachableDriver(context.Context) (driver.Broker, error) {
	// A port that was just free: nothing listens there.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		return nil, err
	}
	return mqtt.New(addr, mqtt.WithInstanceID(h.instance+"-unreachable"), mqtt.WithConnectTimeout(2*time.Second))
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

// RefusedTopic: Mosquitto answers a PUBLISH to $SYS with reason code 0x87 (not
// authorized) and keeps the connection.
func (h *harness) RefusedTopic() string { return "$SYS/msgx/refused" }

// tckMaxMessageBytes keeps the suite's oversized message small.
const tckMaxMessageBytes = 1 << 20

func (h *harness) MaxMessageBytes() int { return tckMaxMessageBytes }

func TestConformance(t *testing.T) {
	requireBroker(t)
	proxy, err := brokertest.NewProxy(brokerAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	brokertest.Run(t, &harness{proxy: proxy, instance: "tck-" + randomHex(4), slots: mqtt.NewSlots()}, brokertest.Options{})
}

func requireBroker(t *testing.T) {
	t.Helper()
	c, err := net.DialTimeout("tcp", brokerAddr(), 2*time.Second)
	if err != nil {
		t.Fatalf("no MQTT broker at %s: %v", brokerAddr(), err)
	}
	_ = c.Close()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
