package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/broker/kafka"
	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// The outage tests run the relay as production does (Run, two workers per
// lane, the production retry policy) against a real broker that goes away
// for longer than the retry budget (5 attempts, 1 s doubling: about 30 s),
// while events keep coming: nothing may go DEAD, nothing may be charged an
// attempt, and everything must arrive after the return, each key in order.
// The relay's clock is a fake the test moves only while no send or probe is
// in flight, so that the outage lasts minutes of the relay's time in
// seconds of the test's; the publish timeout is a real-time bound, shortened
// to 1 s so that a send into the outage ends quickly.

// outagePublishTimeout bounds each send and probe of the outage tests.
const outagePublishTimeout = time.Second

// inflight counts the sends and probes under way, so that the test moves the
// relay's clock only while none is.
// When reject is set, the broker, if it answers, rejects the send of that
// event (as a broker refuses a message too large), whatever else the send
// holds; away, it is away for that send as for any other.
type inflight struct {
	next   *broker.Broker
	n      atomic.Int32
	reject atomic.Pointer[string]
}

func (p *inflight) SendConfirmed(ctx context.Context, topic string, msgs ...*broker.Message) error {
	p.n.Add(1)
	defer p.n.Add(-1)
	if bad := p.reject.Load(); bad != nil {
		for _, m := range msgs {
			if m.Header(broker.HeaderEventID) != *bad {
				continue
			}
			if err := p.next.Ping(ctx); err != nil {
				return driver.Classify(driver.Unavailable, err)
			}
			return driver.Classify(driver.Rejected, errors.New("message too large: "+*bad))
		}
	}
	return p.next.SendConfirmed(ctx, topic, msgs...)
}

func (p *inflight) Ping(ctx context.Context) error {
	p.n.Add(1)
	defer p.n.Add(-1)
	return p.next.Ping(ctx)
}

// wireMsg is one message read back from the broker.
type wireMsg struct{ topic, key, eventID string }

// wireLog collects what a consumer reads, in the broker's order per key.
type wireLog struct {
	mu  sync.Mutex
	got []wireMsg
}

func (w *wireLog) add(m wireMsg) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.got = append(w.got, m)
}

func (w *wireLog) all() []wireMsg {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.got)
}

// outage is one run: a relay over db with a per-key and an unordered
// target on pub, cut and restored by cut.
type outage struct {
	t      *testing.T
	db     *store.DB
	clk    *clock.Fake
	reg    *prometheus.Registry
	r      *outbox.Relay
	pub    *inflight
	wire   *wireLog
	cut    func(down bool)
	topicP string
	topicU string
	want   map[string]bool // event ids enqueued
	round  int
}

const (
	outageKeys = 5
	targetP    = "outage-p"
	targetU    = "outage-u"
)

// enqueueRound enqueues one event per key on the per-key target and as many
// on the unordered one, at the relay's current time.
func (o *outage) enqueueRound() {
	o.t.Helper()
	var evs []outbox.Event
	for k := range outageKeys {
		key := "k" + strconv.Itoa(k)
		for _, tg := range []struct{ target, topic string }{{targetP, o.topicP}, {targetU, o.topicU}} {
			id := fmt.Sprintf("%s/%s/%04d", tg.target, key, o.round)
			evs = append(evs, outbox.Event{ID: id, Target: tg.target, Topic: tg.topic, Key: key, Payload: []byte(id)})
			o.want[id] = true
		}
	}
	o.round++
	enqueue(o.t, o.db, o.clk.Now(), evs...)
}

// outageWorkers is the number of workers of the outage relay (two per lane).
const outageWorkers = 4

// step moves the relay's clock by d once the relay is parked: nothing in
// flight, and every goroutine waiting on the clock (the maintenance loop and
// each worker, idle or probing) except, per paused target, the worker that
// waits for the prober. A claim is never held while the clock moves, so no
// lease runs out under a working relay.
func (o *outage) step(d time.Duration) {
	o.t.Helper()
	testkit.Eventually(o.t, "the relay parked on its clock", 30*time.Second, func() bool {
		if o.pub.n.Load() != 0 {
			return false
		}
		paused := 0
		for _, ts := range o.r.Targets() {
			if ts.Paused {
				paused++
			}
		}
		return o.clk.Waiters() >= 1+outageWorkers-paused && o.pub.n.Load() == 0
	})
	o.clk.Advance(d)
}

// delivered reports whether every enqueued event has been read back.
func (o *outage) delivered() bool { return o.deliveredExcept(nil) }

// deliveredExcept reports whether every enqueued event but those except
// names has been read back.
func (o *outage) deliveredExcept(except func(id string) bool) bool {
	seen := map[string]bool{}
	for _, m := range o.wire.all() {
		seen[m.eventID] = true
	}
	for id := range o.want {
		if !seen[id] && (except == nil || !except(id)) {
			return false
		}
	}
	return true
}

func (o *outage) paused(want bool) bool {
	for _, ts := range o.r.Targets() {
		if ts.Paused != want {
			return false
		}
	}
	return true
}

// queryInt runs a counting query on the test's database.
func (o *outage) queryInt(q string) int {
	o.t.Helper()
	var n int
	if err := o.db.QueryRow(context.Background(), q).Scan(&n); err != nil {
		o.t.Fatal(err)
	}
	return n
}

// run makes the outage of length d (relay time) while events are produced,
// then restores the broker and checks the outcome.
func (o *outage) run(d time.Duration) {
	o.runUntil(d, nil)
	o.checkOrder()
}

// runUntil is run, without the order check, for a broker that after its
// return does not take the events except names: it checks that every other
// event is delivered and sent once, and leaves those in the outbox. The
// relay runs on until the test ends.
func (o *outage) runUntil(d time.Duration, except func(id string) bool) {
	t := o.t
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- o.r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-stopped; err != nil {
			t.Error(err)
		}
	})
	excepted := 0
	defer func() {
		t.Logf("outage of %v: %d events, %d left in the outbox by the broker, held %v+%v, probes %v+%v",
			d, len(o.want), excepted,
			testkit.MetricValue(t, o.reg, "msgx_outbox_held_total", "target", targetP), testkit.MetricValue(t, o.reg, "msgx_outbox_held_total", "target", targetU),
			testkit.MetricValue(t, o.reg, "msgx_outbox_probes_total", "target", targetP), testkit.MetricValue(t, o.reg, "msgx_outbox_probes_total", "target", targetU))
	}()

	// Before: the broker takes events.
	o.enqueueRound()
	testkit.Eventually(t, "the first events on the wire", 60*time.Second, o.delivered)

	// The outage begins while events come: both targets pause.
	o.cut(true)
	o.enqueueRound()
	testkit.Eventually(t, "both targets paused", 30*time.Second, func() bool { return o.paused(true) })
	for _, tg := range []string{targetP, targetU} {
		if v := testkit.MetricValue(t, o.reg, "msgx_outbox_target_up", "target", tg); v != 0 {
			t.Fatalf("%s: msgx_outbox_target_up %v while paused", tg, v)
		}
	}

	// The outage lasts d of the relay's time; events keep coming.
	start := o.clk.Now()
	for i := 0; o.clk.Now().Sub(start) < d; i++ {
		o.step(10 * time.Second)
		if i%3 == 2 {
			o.enqueueRound()
		}
	}
	if !o.paused(true) {
		t.Fatalf("a target resumed while the broker was still away: %+v", o.r.Targets())
	}
	t.Logf("at the return: %+v", o.r.Targets())
	for _, ts := range o.r.Targets() {
		if ts.LastError == "" || ts.Probes == 0 {
			t.Fatalf("paused target without its last error or probes: %+v", ts)
		}
	}
	if n := o.queryInt("SELECT COUNT(*) FROM msgx_outbox WHERE status = 'DEAD'"); n != 0 {
		t.Fatalf("%d events DEAD during the outage", n)
	}
	if n := o.queryInt("SELECT COUNT(*) FROM msgx_outbox WHERE attempts <> 0"); n != 0 {
		t.Fatalf("%d pending events were charged attempts by the outage", n)
	}
	pendingAtReturn := o.queryInt("SELECT COUNT(*) FROM msgx_outbox WHERE status = 'PENDING'")
	if pendingAtReturn < o.round*outageKeys*2-2*outageKeys*2 {
		t.Fatalf("only %d events pending at the return", pendingAtReturn)
	}
	t.Logf("%d events pending at the return", pendingAtReturn)

	// The broker returns: a probe gets through, everything is delivered.
	o.cut(false)
	deadline := time.Now().Add(3 * time.Minute)
	for !o.deliveredExcept(except) || !o.paused(false) {
		if time.Now().After(deadline) {
			t.Fatalf("not delivered 3 minutes after the return; targets %+v", o.r.Targets())
		}
		o.step(time.Second)
	}
	for _, tg := range []string{targetP, targetU} {
		if v := testkit.MetricValue(t, o.reg, "msgx_outbox_target_up", "target", tg); v != 1 {
			t.Fatalf("%s: msgx_outbox_target_up %v after the return", tg, v)
		}
		if v := testkit.MetricValue(t, o.reg, "msgx_outbox_held_total", "target", tg); v == 0 {
			t.Fatalf("%s: nothing held during the outage", tg)
		}
	}
	for id := range o.want {
		if except != nil && except(id) {
			excepted++
		}
	}
	testkit.Eventually(t, "every event marked sent", 30*time.Second, func() bool {
		return o.queryInt("SELECT COUNT(*) FROM msgx_outbox") == excepted
	})
	charged := "SELECT COUNT(*) FROM msgx_outbox_sent WHERE attempts <> 1"
	if except != nil {
		// A send that carried the rejected event failed for the events it
		// shared with it too (Rejected is an event's own failure, and a
		// batch is one send until it is isolated): those may have been
		// charged for it. Nothing is charged for the outage itself.
		charged = "SELECT COUNT(*) FROM msgx_outbox_sent WHERE attempts > 2 OR (attempts = 2 AND last_error NOT LIKE 'message too large%')"
	}
	if n := o.queryInt(charged); n != 0 {
		var why string
		_ = o.db.QueryRow(context.Background(), "SELECT event_id || ' attempts=' || attempts || ' err=' || coalesce(last_error,'') FROM msgx_outbox_sent WHERE attempts <> 1 LIMIT 1").Scan(&why)
		t.Fatalf("%d events charged more than their one successful attempt (one's last error: %s)", n, why)
	}
	if n := o.queryInt("SELECT COUNT(*) FROM msgx_outbox_sent"); n != len(o.want)-excepted {
		t.Fatalf("%d events sent, want %d", n, len(o.want)-excepted)
	}
}

// checkOrder checks the per-key order on the wire of the per-key target.
func (o *outage) checkOrder() {
	t := o.t
	// Per-key order on the wire: a key's events never go back (a repeat of
	// the newest is at-least-once; an older one after a newer is not).
	last := map[string]string{}
	dups := 0
	for _, m := range o.wire.all() {
		if m.topic != o.topicP {
			continue
		}
		if m.key == "" {
			t.Fatalf("a per-key event without its key on the wire: %+v", m)
		}
		prev := last[m.key]
		switch c := strings.Compare(m.eventID, prev); {
		case c < 0:
			t.Fatalf("key %s went back in time on the wire: %s after %s", m.key, m.eventID, prev)
		case c == 0:
			dups++
		}
		last[m.key] = m.eventID
	}
	t.Logf("%d repeats on the per-key topic", dups)
}

// newOutage builds the relay of an outage test over b.
func newOutage(t *testing.T, db *store.DB, b *broker.Broker, wire *wireLog, cut func(bool), topicP, topicU string) *outage {
	o := &outage{t: t, db: db, clk: clock.NewFake(t0), reg: prometheus.NewRegistry(), pub: &inflight{next: b},
		wire: wire, cut: cut, topicP: topicP, topicU: topicU, want: map[string]bool{}}
	o.r = newRelay(t, db, o.clk, outbox.WithRetry(outbox.DefaultRetry()), outbox.WithRegisterer(o.reg),
		outbox.WithPublishTimeout(outagePublishTimeout),
		outbox.Target(targetP, o.pub, outbox.PerKey), outbox.Target(targetU, o.pub, outbox.Unordered))
	return o
}

// TestKafkaOutageChargesNothing: a 10-minute Kafka outage (kfake's control
// hook closes the connection of every request) while events are produced.
func TestKafkaOutageChargesNothing(t *testing.T) {
	db := storetest.NewPostgres(t, store.WithMigrate(outbox.Schema()))
	topicP, topicU := "outage.p", "outage.u"
	kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topicP, topicU))
	if err != nil {
		t.Fatal(err)
	}
	defer kf.Close()
	var down atomic.Bool
	kf.Control(func(kmsg.Request) (kmsg.Response, error, bool) {
		kf.KeepControl()
		if down.Load() {
			return nil, fmt.Errorf("test: Kafka outage"), true
		}
		return nil, nil, false
	})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := broker.New("kafka", kafka.New(kafka.SeedBrokers(kf.ListenAddrs()...), kafka.WithLogger(testkit.Quiet())), broker.WithLogger(testkit.Quiet()))
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Stop(context.Background()) }()

	wire := &wireLog{}
	cl, err := kgo.NewClient(kgo.SeedBrokers(kf.ListenAddrs()...), kgo.ConsumeTopics(topicP, topicU),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		for ctx.Err() == nil {
			cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
				m := wireMsg{topic: r.Topic, key: string(r.Key)}
				for _, h := range r.Headers {
					if h.Key == broker.HeaderEventID {
						m.eventID = string(h.Value)
					}
				}
				wire.add(m)
			})
		}
	}()
	defer func() { cancel(); <-consumed }()

	newOutage(t, db, b, wire, down.Store, topicP, topicU).run(10 * time.Minute)
}
