package mqtt

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"testing"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho/session/state"

	"github.com/msgx/msgx/broker/driver"
)

func TestWireRoundTrip(t *testing.T) {
	cases := []*driver.Message{
		{Payload: []byte{0, 0xff, 0x80}},
		// The key and the partition-key header the port mirrors it into, in
		// every combination: the wire may share them, the receiver may not
		// confuse them.
		{Key: "k", Headers: map[string]string{driver.HeaderPartitionKey: "k"}},
		{Key: "k", Headers: map[string]string{driver.HeaderPartitionKey: "other"}},
		{Key: "k", Headers: map[string]string{"x": "y"}},
		{Key: "", Headers: map[string]string{driver.HeaderPartitionKey: "h"}},
		{Key: "", Headers: map[string]string{driver.HeaderPartitionKey: ""}},
		{Key: "tab\tkey", Headers: map[string]string{driver.HeaderPartitionKey: "tab\tkey"}},
		{Key: "tab\tkey", Headers: map[string]string{driver.HeaderPartitionKey: "plain"}},
		{Key: "k", Payload: []byte("p"), Headers: map[string]string{"a": "1", "msgx-event-id": "e"}},
		// Strings Mosquitto refuses (control characters, invalid UTF-8, a
		// non-character) and names the adapter reserves travel base64-encoded.
		{Key: "line\nbreak", Headers: map[string]string{
			"reason":          "panic: boom\n\tstack",
			"bad\x00name":     "v",
			"latin1":          "caf\xe9",
			"nonchar":         "x\uFFFEy",
			KeyProperty:       "a header named like the key property",
			headerB64Property: "and one named like the escape",
			"empty":           "",
			"unicode":         "Ünïcødé ✓",
		}},
	}
	for _, m := range cases {
		p := toPublish("t", m)
		if p.QoS != 1 {
			t.Errorf("QoS = %d, want 1", p.QoS)
		}
		for _, u := range p.Properties.User {
			if !mqttString(u.Key) || !mqttString(u.Value) {
				t.Errorf("user property %q=%q is not a string the broker accepts", u.Key, u.Value)
			}
		}
		got := fromPublish(p)
		if got.Key != m.Key || string(got.Payload) != string(m.Payload) {
			t.Errorf("key/payload = %q/%x, want %q/%x", got.Key, got.Payload, m.Key, m.Payload)
		}
		if len(m.Headers) > 0 && !maps.Equal(got.Headers, m.Headers) {
			t.Errorf("headers = %q, want %q", got.Headers, m.Headers)
		}
	}
}

func TestMQTTString(t *testing.T) {
	for s, want := range map[string]bool{
		"plain": true, "Ünïcødé ✓": true, "bom\uFEFF": true, "": true,
		"tab\t": false, "nl\n": false, "nul\x00": false, "del\x7f": false, "c1\u0085": false,
		"bad\xff": false, "nonchar\uFDD0": false, "nonchar\U0001FFFF": false,
	} {
		if got := mqttString(s); got != want {
			t.Errorf("mqttString(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestValidTopicAndGroup(t *testing.T) {
	for _, topic := range []string{"", "a/+/b", "a/#", "nl\n"} {
		if err := validTopic(topic); !errors.Is(err, ErrInvalidTopic) {
			t.Errorf("validTopic(%q) = %v, want ErrInvalidTopic", topic, err)
		}
	}
	if err := validTopic("orders/eu.dlq"); err != nil {
		t.Errorf("validTopic: %v", err)
	}
	for _, g := range []string{"", "a/b", "a+", "#"} {
		if validGroup(g) == nil {
			t.Errorf("validGroup(%q) accepted", g)
		}
	}
	if err := validGroup("billing"); err != nil {
		t.Errorf("validGroup: %v", err)
	}
}

func TestSlots(t *testing.T) {
	s := NewSlots()
	a, b := s.acquire("k"), s.acquire("k")
	if a != 0 || b != 1 {
		t.Fatalf("slots = %d, %d; want 0, 1", a, b)
	}
	if other := s.acquire("other"); other != 0 {
		t.Errorf("another key got slot %d, want 0", other)
	}
	s.release("k", a)
	if c := s.acquire("k"); c != 0 {
		t.Errorf("after release got slot %d, want the freed 0", c)
	}
	if d := s.acquire("k"); d != 2 {
		t.Errorf("got slot %d, want 2", d)
	}
}

func TestClientID(t *testing.T) {
	id := ClientID("host-1", "orders", "billing", 0)
	if id != ClientID("host-1", "orders", "billing", 0) {
		t.Error("client id is not stable")
	}
	for _, other := range []string{
		ClientID("host-2", "orders", "billing", 0),
		ClientID("host-1", "orders2", "billing", 0),
		ClientID("host-1", "orders", "billing2", 0),
		ClientID("host-1", "orders", "billing", 1),
	} {
		if other == id {
			t.Errorf("%q collides", other)
		}
	}
}

// A broker that announces a session takeover (reason code 0x8e) stops the
// displaced subscription instead of letting two consumers fight for the id.
func TestTakenOverStopsSubscription(t *testing.T) {
	s := &subscription{clientID: "c", filter: "$share/g/t", ready: make(chan struct{}, 1), done: make(chan struct{})}
	ss := &subSession{State: state.NewInMemory(), s: s}
	if err := ss.ConnectionLost(&packets.Disconnect{ReasonCode: reasonSessionTakenOver}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Receive(context.Background(), 1); !errors.Is(err, ErrTakenOver) {
		t.Errorf("Receive after takeover = %v, want ErrTakenOver", err)
	}
}

func TestMirroredKeyTravelsOnce(t *testing.T) {
	p := toPublish("t", &driver.Message{Key: "k", Headers: map[string]string{driver.HeaderPartitionKey: "k"}})
	if n := len(p.Properties.User); n != 1 {
		t.Errorf("%d user properties for a key mirrored into its header, want 1: %v", n, p.Properties.User)
	}
}

func TestPacketSizeIsTheWireSize(t *testing.T) {
	for _, n := range []int{0, 100, 16_000, 2_100_000} {
		p := toPublish("a/b", &driver.Message{Key: "k", Payload: make([]byte, n), Headers: map[string]string{"h": "v"}})
		var wire bytes.Buffer
		if _, err := p.Packet().WriteTo(&wire); err != nil {
			t.Fatal(err)
		}
		if got := packetSize(p); got != wire.Len() {
			t.Errorf("payload %d: packetSize = %d, written %d", n, got, wire.Len())
		}
	}
}

func TestPacketLimit(t *testing.T) {
	for _, c := range []struct{ configured, broker, want int }{
		{0, 0, 0}, {100, 0, 100}, {0, 200, 200}, {100, 200, 100}, {300, 200, 200},
	} {
		if got := packetLimit(c.configured, c.broker); got != c.want {
			t.Errorf("packetLimit(%d, %d) = %d, want %d", c.configured, c.broker, got, c.want)
		}
	}
}
