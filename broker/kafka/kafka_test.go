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
	"github.com/twmb/franz-go/pkg/kerr"
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

// started returns a started driver, closed at the end of the test.
func (c *cluster) started(t *testing.T, ctx context.Context, opts ...kafka.Option) *kafka.Driver {
	t.Helper()
	d := c.driver(opts...)
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close(context.Background()) })
	return d
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

func (h *harness) Target() string { return "kfake, in-process Kafka wire protocol" }

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

func (h *harness) network() brokertest.ProxyNetwork {
	ps := make(brokertest.ProxyNetwork, 0, len(h.c.proxies))
	for _, p := range h.c.proxies {
		ps = append(ps, p)
	}
	return ps
}

func (h *harness) Stall(ctx context.Context) (func(), error) { return h.network().Stall(ctx) }

func (h *harness) Latency(ctx context.Context, d time.Duration) (func(), error) {
	return h.network().Latency(ctx, d)
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

// RefusedTopic is a topic whose max.message.bytes no record fits.
func (h *harness) RefusedTopic() string { return h.refused }

// MaxMessageBytes is the adapter's default limit (WithMaxMessageBytes), which
// the harness's drivers keep: the client refuses a larger record before
// sending it.
func (h *harness) MaxMessageBytes() int { return kafka.DefaultMaxMessageBytes }

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
	refused := "refused-" + randomSuffix()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.createRefusedTopic(ctx, refused); err != nil {
		t.Fatal(err)
	}
	brokertest.Run(t, &harness{c: c, refused: refused}, brokertest.Options{})
}

// createRefusedTopic creates a topic that exists (so a subscription may name
// it as its dead-letter topic) but refuses every record as too large.
func (c *cluster) createRefusedTopic(ctx context.Context, name string) error {
	resp, err := c.adm.CreateTopic(ctx, 1, -1, map[string]*string{"max.message.bytes": kadm.StringPtr("1")}, name)
	if err != nil {
		return err
	}
	return resp.Err
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
	// Topics are not auto-created: sending again fails the same way.
	if code := driver.Code(err); code != driver.Rejected {
		t.Errorf("publish to a missing topic: class %v, want %v", code, driver.Rejected)
	}
	t.Logf("failed after %v: %v", time.Since(start), err)
}

// A publish deadline shorter than the client's wait for a new topic's
// metadata (refreshes 5 s apart) ends before the client gives up on the
// topic. The publish must still say the topic is missing (Rejected), not
// that the broker did not answer (Unavailable): a relay would otherwise hold
// the whole target for ever on one event for a topic nobody created, while
// the broker answers every probe.
func TestPublishToMissingTopicWithAShortDeadlineIsRejected(t *testing.T) {
	c := newCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := c.driver()
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer d.Close(ctx)
	topic := "missing-" + randomSuffix()
	for i := range 2 { // the second publish finds the client already waiting on the topic
		pctx, pcancel := context.WithTimeout(ctx, 300*time.Millisecond)
		err := d.Publish(pctx, topic, []*driver.Message{{Payload: []byte("x")}})
		pcancel()
		if code := driver.Code(err); code != driver.Rejected {
			t.Fatalf("publish %d to a missing topic with a short deadline: class %v, want %v (%v)", i, code, driver.Rejected, err)
		}
		if !errors.Is(err, kerr.UnknownTopicOrPartition) {
			t.Errorf("publish %d: %v does not carry the broker's UNKNOWN_TOPIC_OR_PARTITION", i, err)
		}
	}
	// An existing topic's publish with the same deadline still succeeds.
	if err := c.createTopic(ctx, topic, 1); err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 20*time.Second)
	defer pcancel()
	if err := d.Publish(pctx, topic, []*driver.Message{{Payload: []byte("y")}}); err != nil {
		t.Fatalf("publish to the created topic: %v", err)
	}
}

// A publish the cut-off brokers never confirm ends with the caller's deadline
// as Unavailable (the records wait in the client for a broker), and the next
// one goes through once the brokers are back.
func TestPublishDuringOutageIsUnavailable(t *testing.T) {
	c := newCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topic := "outage-" + randomSuffix()
	if err := c.createTopic(ctx, topic, 1); err != nil {
		t.Fatal(err)
	}
	d := c.started(t, ctx)
	if err := d.Publish(ctx, topic, []*driver.Message{{Payload: []byte("before")}}); err != nil {
		t.Fatal(err)
	}
	for _, p := range c.proxies {
		p.Cut()
	}
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	err := d.Publish(short, topic, []*driver.Message{{Payload: []byte("during")}})
	cancelShort()
	if code := driver.Code(err); code != driver.Unavailable {
		t.Errorf("publish while every broker is cut off: class %v, want %v: %v", code, driver.Unavailable, err)
	}
	for _, p := range c.proxies {
		p.Restore()
	}
	if err := d.Publish(ctx, topic, []*driver.Message{{Payload: []byte("after")}}); err != nil {
		t.Fatalf("publish after the outage: %v", err)
	}
}

// revokeFixture is a topic with two records per partition (payload
// p<partition>-<offset>), a member A holding all of them, and the options
// for a second member B. With retry, the group's retry topic has two such
// records per partition as well (payload rp<partition>-<offset>), as if A
// had requeued them, and A holds those too.
type revokeFixture struct {
	c     *cluster
	topic string
	dests map[string]string // topic holding records -> their payloads' prefix
	spec  driver.SubscriptionSpec
	pr    *kgo.Client
	held  map[string]driver.Delivery
	opts  []kafka.Option
}

func newRevokeFixture(t *testing.T, ctx context.Context, revokeTimeout time.Duration, retry bool) *revokeFixture {
	t.Helper()
	c := newCluster(t)
	f := &revokeFixture{c: c, topic: "revoke-" + randomSuffix(), held: map[string]driver.Delivery{}}
	f.spec = driver.SubscriptionSpec{Topic: f.topic, Group: "g-" + randomSuffix(), DeadLetterTopic: f.topic + ".dlq", Prefetch: 32}
	f.dests = map[string]string{f.topic: ""}
	if retry {
		f.dests[kafka.RetryTopic(f.topic, f.spec.Group)] = "r"
	}
	for dest := range f.dests {
		// The subscription finds the retry topic there and keeps it.
		if err := c.createTopic(ctx, dest, partitions); err != nil {
			t.Fatal(err)
		}
	}
	pr, err := kgo.NewClient(kgo.SeedBrokers(c.kf.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pr.Close)
	f.pr = pr
	f.produce(t, ctx, 0)
	f.produce(t, ctx, 1)
	f.opts = []kafka.Option{
		kafka.WithCommitInterval(50 * time.Millisecond),
		kafka.WithRevokeTimeout(revokeTimeout),
		kafka.WithClientOptions(kgo.HeartbeatInterval(200 * time.Millisecond)),
	}
	da := c.driver(f.opts...)
	if err := da.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = da.Close(context.Background()) })
	subA, err := da.Subscribe(ctx, f.spec)
	if err != nil {
		t.Fatal(err)
	}
	for len(f.held) < 2*partitions*len(f.dests) {
		ds, err := subA.Receive(ctx, 32)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			f.held[string(d.Message().Payload)] = d
		}
	}
	return f
}

// produce writes record <prefix>p<partition>-<seq> to every partition of
// every topic of the fixture.
func (f *revokeFixture) produce(t *testing.T, ctx context.Context, seq int) {
	t.Helper()
	for dest, prefix := range f.dests {
		for p := int32(0); p < partitions; p++ {
			r := &kgo.Record{Topic: dest, Partition: p, Value: []byte(fmt.Sprintf("%sp%d-%d", prefix, p, seq))}
			if err := f.pr.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// waitCommitted waits until the committed offset of every partition of
// every topic of the fixture is at.
func (f *revokeFixture) waitCommitted(t *testing.T, ctx context.Context, at int64) {
	t.Helper()
	f.c.waitOffsets(t, ctx, f.spec.Group, func(offs kadm.OffsetResponses) bool {
		n := 0
		offs.Each(func(o kadm.OffsetResponse) {
			if _, ok := f.dests[o.Topic]; ok && o.At == at {
				n++
			}
		})
		return n == partitions*len(f.dests)
	})
}

// joinB starts member B and returns a function receiving (and acking) until
// it holds n distinct payloads.
func (f *revokeFixture) joinB(t *testing.T, ctx context.Context) func(n int) map[string]bool {
	t.Helper()
	db := f.c.driver(f.opts...)
	if err := db.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close(context.Background()) })
	subB, err := db.Subscribe(ctx, f.spec)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	return func(n int) map[string]bool {
		for len(got) < n {
			ds, err := subB.Receive(ctx, 32)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range ds {
				got[string(d.Message().Payload)] = true
				if err := d.Ack(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		return got
	}
}

// TestRevokeCommitsOnlyWhatWasSettled: a member holding unsettled deliveries
// loses half its partitions to a new member. The revoke waits for them (here
// only briefly), commits the settled prefix and forgets the partitions: the
// late settlements fail with ErrRevoked, and the new owner resumes exactly at
// the unfinished messages, never after them and never before the settled ones.
// The group's retry topic is consumed in the same group: its partitions are
// shared by the members, and revoked, exactly like the topic's own, and the
// two topics' partitions of equal numbers never stand for one another.
func TestRevokeCommitsOnlyWhatWasSettled(t *testing.T) {
	for _, retry := range []bool{false, true} {
		name := "topic"
		if retry {
			name = "topic and retry topic"
		}
		t.Run(name, func(t *testing.T) { testRevokeCommitsOnlyWhatWasSettled(t, retry) })
	}
}

func testRevokeCommitsOnlyWhatWasSettled(t *testing.T, retry bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := newRevokeFixture(t, ctx, 300*time.Millisecond, retry)
	for _, prefix := range f.dests {
		for p := 0; p < partitions; p++ {
			if err := f.held[fmt.Sprintf("%sp%d-0", prefix, p)].Ack(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	f.waitCommitted(t, ctx, 1)

	// B joins: a cooperative rebalance moves half the partitions to it.
	gotB := f.joinB(t, ctx)(partitions / 2 * len(f.dests))
	for id := range gotB {
		if id[len(id)-1] != '1' {
			t.Errorf("new owner received %s, which was settled and committed before the rebalance", id)
		}
	}
	// Each member holds half of each topic's partitions.
	gs, err := f.c.adm.DescribeGroups(ctx, f.spec.Group)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range gs[f.spec.Group].Members {
		a, _ := m.Assigned.AsConsumer()
		held := map[string]int{}
		for _, tp := range a.Topics {
			held[tp.Topic] += len(tp.Partitions)
		}
		for dest := range f.dests {
			if held[dest] != partitions/2 {
				t.Errorf("member %s holds %d partitions of %s, want %d", m.MemberID, held[dest], dest, partitions/2)
			}
		}
	}
	for dest, prefix := range f.dests {
		revoked := 0
		for p := 0; p < partitions; p++ {
			id := fmt.Sprintf("%sp%d-1", prefix, p)
			err := f.held[id].Ack(ctx)
			switch {
			case errors.Is(err, kafka.ErrRevoked):
				revoked++
				if !gotB[id] {
					t.Errorf("%s: settlement refused as revoked, but the new owner did not get it", id)
				}
			case err != nil:
				t.Errorf("%s: ack: %v", id, err)
			case gotB[id]:
				t.Errorf("%s: acked on the old owner although its partition moved", id)
			}
		}
		if revoked != partitions/2 {
			t.Errorf("%s: %d settlements refused as revoked, want %d", dest, revoked, partitions/2)
		}
	}
	// A's settlements of the partitions it kept are committed, to the topic
	// they were read from.
	f.c.waitOffsets(t, ctx, f.spec.Group, func(offs kadm.OffsetResponses) bool {
		n := 0
		offs.Each(func(o kadm.OffsetResponse) {
			if _, ok := f.dests[o.Topic]; ok && o.At == 2 {
				n++
			}
		})
		return n == partitions*len(f.dests)
	})
}

// TestRevokeWaitsForInFlight: deliveries settled while a rebalance waits for
// them are committed before the partitions move, so the new owner does not
// see them again.
func TestRevokeWaitsForInFlight(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := newRevokeFixture(t, ctx, 20*time.Second, false)
	recvB := f.joinB(t, ctx)
	// The first cooperative round takes the moving partitions from A without
	// giving them to B yet; A's revoke is then waiting for its deliveries.
	for {
		gs, err := f.c.adm.DescribeGroups(ctx, f.spec.Group)
		if err != nil {
			t.Fatal(err)
		}
		g := gs[f.spec.Group]
		n := len(g.AssignedPartitions()[f.topic])
		if g.State == "Stable" && len(g.Members) == 2 && n == partitions/2 {
			break
		}
		if len(g.Members) == 2 && n == partitions {
			t.Error("the partitions moved without waiting for their in-flight deliveries")
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("rebalance never reached the revoking round: %+v", g)
		case <-time.After(10 * time.Millisecond):
		}
	}
	for _, d := range f.held {
		if err := d.Ack(ctx); err != nil {
			t.Errorf("ack during revoke: %v", err)
		}
	}
	f.waitCommitted(t, ctx, 2)
	f.produce(t, ctx, 2)
	gotB := recvB(partitions / 2)
	for id := range gotB {
		if id[len(id)-1] != '2' {
			t.Errorf("new owner received %s, which was settled during the revoke", id)
		}
	}
}

// TestReceiveWaitsForRoomAndASettlementWakesIt: with the prefetch window
// full, Receive waits; the settlement that makes room wakes it, whichever
// delivery it settles.
func TestReceiveWaitsForRoomAndASettlementWakesIt(t *testing.T) {
	c := newCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	topic := "room-" + randomSuffix()
	if err := c.createTopic(ctx, topic, 1); err != nil {
		t.Fatal(err)
	}
	d := c.started(t, ctx)
	msgs := make([]*driver.Message, 6)
	for i := range msgs {
		msgs[i] = &driver.Message{Key: "k", Payload: []byte{byte('0' + i)}}
	}
	if err := d.Publish(ctx, topic, msgs); err != nil {
		t.Fatal(err)
	}
	sub, err := d.Subscribe(ctx, driver.SubscriptionSpec{Topic: topic, Group: "g-" + randomSuffix(), Prefetch: 2})
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan struct{}, 1)
	kafka.OnWaitingForRoom(sub, func() {
		select {
		case waiting <- struct{}{}:
		default:
		}
	})
	var held []driver.Delivery
	for len(held) < 2 {
		ds, err := sub.Receive(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ds...)
	}
	if len(held) != 2 {
		t.Fatalf("%d deliveries out with a prefetch of 2", len(held))
	}
	for round := range 4 {
		got := make(chan []driver.Delivery, 1)
		go func() {
			ds, err := sub.Receive(ctx, 10)
			if err != nil {
				t.Error(err)
			}
			got <- ds
		}()
		select {
		case <-waiting:
		case <-ctx.Done():
			t.Fatalf("round %d: Receive did not wait with the window full", round)
		}
		// The older delivery on even rounds, the newer on odd ones.
		i := round % 2
		if err := held[i].Ack(ctx); err != nil {
			t.Fatal(err)
		}
		held = append(held[:i], held[i+1:]...)
		select {
		case ds := <-got:
			if len(ds) != 1 {
				t.Fatalf("round %d: %d deliveries for one freed slot", round, len(ds))
			}
			held = append(held, ds...)
		case <-ctx.Done():
			t.Fatalf("round %d: the settlement that made room did not wake Receive", round)
		}
	}
	for _, h := range held {
		if err := h.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	_ = sub.Close(ctx)
}

// TestReleaseRewindsWhenRepublishFails: a released delivery whose copy
// cannot be re-published (the group's retry topic refuses it as too large)
// is given back by rewinding its partition: Receive hands it out again, with
// the record after it, even with the prefetch window full before the release.
func TestReleaseRewindsWhenRepublishFails(t *testing.T) {
	c := newCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topic, group := "rewind-"+randomSuffix(), "g-"+randomSuffix()
	if err := c.createTopic(ctx, topic, 1); err != nil {
		t.Fatal(err)
	}
	// The subscription finds its retry topic there and keeps it as it is.
	resp, err := c.adm.CreateTopic(ctx, 1, -1, map[string]*string{"max.message.bytes": kadm.StringPtr("300")}, kafka.RetryTopic(topic, group))
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	d := c.started(t, ctx)
	if err := d.Publish(ctx, topic, []*driver.Message{{Payload: []byte("a")}, {Payload: []byte("b")}}); err != nil {
		t.Fatal(err)
	}
	sub, err := d.Subscribe(ctx, driver.SubscriptionSpec{Topic: topic, Group: group, DeadLetterTopic: topic + ".dlq", Prefetch: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(context.Background())
	var held []driver.Delivery
	for len(held) < 2 {
		ds, err := sub.Receive(ctx, 2)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ds...)
	}
	tooLarge := &driver.Message{Payload: make([]byte, 1000)}
	_, _ = rand.Read(tooLarge.Payload) // incompressible
	if err := held[0].Release(ctx, tooLarge, 0); err != nil {
		t.Fatalf("release: %v", err)
	}
	if err := held[1].Ack(ctx); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("ack of a delivery behind the rewound one = %v, want ErrNotHeld", err)
	}
	var again []string
	for len(again) < 2 {
		ds, err := sub.Receive(ctx, 2)
		if err != nil {
			t.Fatalf("receive after release: %v", err)
		}
		for _, x := range ds {
			again = append(again, string(x.Message().Payload))
			if err := x.Ack(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if fmt.Sprint(again) != "[a b]" {
		t.Errorf("after the rewind got %v, want [a b]", again)
	}
}

// TestSubscribeCreatesTheDeadLetterTopic: a dead-letter topic that does not
// exist is created when the subscription starts, so the first dead letter
// has somewhere to go.
func TestSubscribeCreatesTheDeadLetterTopic(t *testing.T) {
	c := newCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topic := "dlqcreate-" + randomSuffix()
	if err := c.createTopic(ctx, topic, 1); err != nil {
		t.Fatal(err)
	}
	d := c.started(t, ctx)
	sub, err := d.Subscribe(ctx, driver.SubscriptionSpec{Topic: topic, Group: "g-" + randomSuffix(), DeadLetterTopic: topic + ".dlq"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(context.Background())
	topics, err := c.adm.ListTopics(ctx, topic+".dlq")
	if err != nil {
		t.Fatal(err)
	}
	if !topics.Has(topic + ".dlq") {
		t.Fatalf("dead-letter topic %s.dlq was not created at subscribe time", topic)
	}
}

// TestDeclaredTopicIsCreatedWithItsConfigs: WithTopic creates a missing topic
// at Start with its partitions and configs (a compacted state topic).
func TestDeclaredTopicIsCreatedWithItsConfigs(t *testing.T) {
	c := newCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topic := "state-" + randomSuffix()
	c.started(t, ctx, kafka.WithTopic(topic, 3, map[string]string{"cleanup.policy": "compact"}))
	details, err := c.adm.ListTopics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(details[topic].Partitions); got != 3 {
		t.Errorf("declared topic has %d partitions, want 3", got)
	}
	cfgs, err := c.adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := cfgs.On(topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	policy := ""
	for _, cf := range rc.Configs {
		if cf.Key == "cleanup.policy" && cf.Value != nil {
			policy = *cf.Value
		}
	}
	if policy != "compact" {
		t.Errorf("cleanup.policy = %q, want compact", policy)
	}
	// A second driver declaring the same topic finds it and starts.
	d2 := c.driver(kafka.WithTopic(topic, 3, map[string]string{"cleanup.policy": "compact"}))
	if err := d2.Start(ctx); err != nil {
		t.Fatalf("start with an existing declared topic: %v", err)
	}
	_ = d2.Close(context.Background())
}
