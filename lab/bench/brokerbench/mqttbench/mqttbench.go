// Package mqttbench is both sides of `msgx-bench broker --adapter mqtt`: the
// port over a Driver beside a raw paho client doing the same work, and a
// private Mosquitto to run them against.
package mqttbench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/broker/mqtt"
	"github.com/msgx/msgx/lab/bench/brokerbench"
)

// benchSessionExpiry keeps benchmark sessions on the broker only briefly.
const benchSessionExpiry = 10 * time.Minute

// Adapter is the `msgx-bench broker --adapter mqtt` side of this adapter:
// the port over a Driver beside a raw paho client doing the same work. Both
// consume as slot 0 of one instance id, so the group sessions Setup creates
// before anything is published are the ones the consumers resume.
//
// The backlog is published before anyone consumes: Mosquitto keeps at most
// max_queued_messages (default 1000) QoS 1 messages per absent session and
// drops the rest, so n must stay within the broker's setting.
func Adapter(server string, prefetch int) brokerbench.Adapter {
	instance := fmt.Sprintf("msgx-bench-%x", time.Now().UnixNano())
	if !strings.Contains(server, "://") {
		server = "mqtt://" + server
	}
	return brokerbench.Adapter{
		Name: "mqtt",
		Setup: func(ctx context.Context, topic, group string) error {
			c, err := rawConnect(ctx, server, mqtt.ClientID(instance, topic, group, 0), true, 0, false)
			if err != nil {
				return err
			}
			defer c.Disconnect(&paho.Disconnect{})
			return rawSubscribe(ctx, c, topic, group)
		},
		NewDriver: func(context.Context) (driver.Broker, error) {
			return mqtt.New(server, mqtt.WithInstanceID(instance), mqtt.WithSessionExpiry(benchSessionExpiry), mqtt.WithDeadLetterExpiry(benchSessionExpiry))
		},
		NewRaw: func(context.Context) (brokerbench.Raw, error) {
			return &Raw{server: server, instance: instance, prefetch: prefetch}, nil
		},
	}
}

// Raw is the raw paho client side of the benchmark.
type Raw struct {
	server   string
	instance string
	prefetch int
	mu       sync.Mutex
	pub      *paho.Client
}

// rawConnect opens a paho client on a plain TCP connection.
func rawConnect(ctx context.Context, server, clientID string, clean bool, receiveMax uint16, manualAck bool,
	onPublish ...func(paho.PublishReceived) (bool, error)) (*paho.Client, error) {
	u := strings.TrimPrefix(server, "mqtt://")
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "tcp", u)
	if err != nil {
		return nil, fmt.Errorf("mqtt bench: dial %s: %w", u, err)
	}
	c := paho.NewClient(paho.ClientConfig{
		Conn:                       conn,
		ClientID:                   clientID,
		EnableManualAcknowledgment: manualAck,
		// paho sends manual acknowledgements on a ticker (50 ms by default);
		// 1 ms keeps it from being the bottleneck.
		SendAcksInterval:  time.Millisecond,
		OnPublishReceived: onPublish,
	})
	expiry := uint32(benchSessionExpiry / time.Second)
	cp := &paho.Connect{ClientID: clientID, CleanStart: clean, KeepAlive: 30,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}}
	if receiveMax > 0 {
		cp.Properties.ReceiveMaximum = &receiveMax
	}
	if _, err := c.Connect(ctx, cp); err != nil {
		return nil, fmt.Errorf("mqtt bench: connect %s: %w", clientID, err)
	}
	return c, nil
}

func rawSubscribe(ctx context.Context, c *paho.Client, topic, group string) error {
	sa, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "$share/" + group + "/" + topic, QoS: 1}}})
	if err != nil {
		return fmt.Errorf("mqtt bench: subscribe: %w", err)
	}
	if len(sa.Reasons) > 0 && sa.Reasons[0] >= 0x80 {
		return fmt.Errorf("mqtt bench: subscribe: reason code 0x%02x", sa.Reasons[0])
	}
	return nil
}

// Publish sends n keyed messages in batches: each batch is published
// concurrently and waited for until every PUBACK arrived.
func (r *Raw) Publish(ctx context.Context, topic string, payload []byte, n, batch int) error {
	r.mu.Lock()
	if r.pub == nil {
		c, err := rawConnect(ctx, r.server, fmt.Sprintf("%s-rawpub", r.instance), true, 0, false)
		if err != nil {
			r.mu.Unlock()
			return err
		}
		r.pub = c
	}
	c := r.pub
	r.mu.Unlock()
	errs := make([]error, batch)
	var wg sync.WaitGroup
	for sent := 0; sent < n; sent += batch {
		k := min(batch, n-sent)
		for i := range k {
			wg.Add(1)
			// The key travels as the port's does (the port's benchmark messages
			// have keys too), so both sides move the same information.
			key := strconv.Itoa((sent + i) % 1000)
			go func() {
				defer wg.Done()
				_, errs[i] = c.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Payload: payload,
					Properties: &paho.PublishProperties{User: paho.UserProperties{{Key: mqtt.KeyProperty, Value: key}}}})
			}()
		}
		wg.Wait()
		if err := errors.Join(errs[:k]...); err != nil {
			return err
		}
	}
	return nil
}

// Consume resumes the group session Setup created and acknowledges n messages
// one by one (paho's manual acknowledgement).
func (r *Raw) Consume(ctx context.Context, topic, group string, n int) error {
	got := make(chan *paho.Publish, n)
	c, err := rawConnect(ctx, r.server, mqtt.ClientID(r.instance, topic, group, 0), false, uint16(min(max(r.prefetch, 1), 65535)), true,
		func(pr paho.PublishReceived) (bool, error) {
			got <- pr.Packet
			return true, nil
		})
	if err != nil {
		return err
	}
	defer c.Disconnect(&paho.Disconnect{})
	if err := rawSubscribe(ctx, c, topic, group); err != nil {
		return err
	}
	// Messages the broker dropped never come: give up after a quiet spell.
	const quiet = 10 * time.Second
	idle := time.NewTimer(quiet)
	defer idle.Stop()
	for i := 0; i < n; i++ {
		select {
		case p := <-got:
			if err := c.Ack(p); err != nil {
				return fmt.Errorf("mqtt bench: ack: %w", err)
			}
			idle.Reset(quiet)
		case <-idle.C:
			return fmt.Errorf("mqtt bench: %d of %d messages arrived, none for %v (is the broker's max_queued_messages below n?)", i, n, quiet)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Close releases the publisher.
func (r *Raw) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pub != nil {
		return r.pub.Disconnect(&paho.Disconnect{})
	}
	return nil
}
