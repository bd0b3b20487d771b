package mqtt_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/mqtt"
)

// lockedConn is a connection with a write lock, as autopaho gives paho for
// TLS: paho takes the lock around each packet and writes the packet's parts
// in several Write calls. It counts the writes made without the lock held,
// each a frame that could land inside one of paho's.
type lockedConn struct {
	net.Conn
	mu       sync.Mutex
	held     atomic.Bool
	unlocked *atomic.Int64
	writes   *atomic.Int64
}

func (c *lockedConn) Lock()   { c.mu.Lock(); c.held.Store(true) }
func (c *lockedConn) Unlock() { c.held.Store(false); c.mu.Unlock() }

func (c *lockedConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	if !c.held.Load() {
		c.unlocked.Add(1)
	}
	return c.Conn.Write(b)
}

// TestPubacksTakePahosWriteLock: with many settlements at once on a
// connection that has a write lock (TLS, WebSocket), every PUBACK write
// holds paho's lock, so no frame interleaves with paho's own packets, and
// every message is acknowledged once (none comes back).
func TestPubacksTakePahosWriteLock(t *testing.T) {
	requireBroker(t)
	var unlocked, writes atomic.Int64
	wrap := func(c net.Conn) net.Conn { return &lockedConn{Conn: c, unlocked: &unlocked, writes: &writes} }
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	topic := unique("puback")
	d, err := mqtt.New(brokerAddr(), mqtt.WithInstanceID(unique("inst")), mqtt.WithSessionExpiry(time.Minute),
		mqtt.WithDeadLetterExpiry(time.Minute), mqtt.WithConnWrapper(wrap), mqtt.WithLogger(quiet),
		// Pings while the settlements run: paho writes of its own.
		mqtt.WithKeepAlive(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	b := broker.New("mqtt", d, broker.WithLogger(quiet))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = b.Stop(sctx)
	}()

	const n = 2000
	var mu sync.Mutex
	seen := map[string]int{}
	all := make(chan struct{})
	if _, err := b.Listen(ctx, broker.Subscription{Topic: topic, Group: "g", Concurrency: 16, Prefetch: 256},
		func(_ context.Context, dl *broker.Delivery) error {
			mu.Lock()
			defer mu.Unlock()
			id := string(dl.Payload)
			seen[id]++
			if len(seen) == n && seen[id] == 1 {
				close(all)
			}
			return nil
		}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i += 100 {
		msgs := make([]*broker.Message, 100)
		for j := range msgs {
			msgs[j] = &broker.Message{Payload: []byte(fmt.Sprint("m", i+j))}
		}
		if err := b.SendConfirmed(ctx, topic, msgs...); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-all:
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("%d of %d messages handled", len(seen), n)
	}
	// A message whose PUBACK was lost or garbled comes back: a bounded
	// quiet period, then every id counted once.
	time.Sleep(time.Second)
	mu.Lock()
	defer mu.Unlock()
	for id, c := range seen {
		if c != 1 {
			t.Errorf("%s handled %d times", id, c)
		}
	}
	if u := unlocked.Load(); u != 0 {
		t.Errorf("%d of %d writes without paho's write lock: their frames can land inside paho's", u, writes.Load())
	}
}
