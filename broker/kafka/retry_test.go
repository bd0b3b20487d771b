package kafka_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/msgx/msgx/backoff"
	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/broker/kafka"
)

// attempt is one handler run of group A.
type attempt struct {
	id         string
	count      int  // the delivery's redelivery count
	positioned bool // the delivery had a log position
}

// requeueFixture is a topic read by two groups: A through the port, whose
// handler fails the first attempt at message "rq", and B through the driver
// alone, so that B sees every record its group is given, including copies
// the port would drop as another group's.
type requeueFixture struct {
	c        *cluster
	topic    string
	groupA   string
	pa       *broker.Broker
	attempts chan attempt
	subB     driver.Subscription
}

func newRequeueFixture(t *testing.T, ctx context.Context) *requeueFixture {
	t.Helper()
	c := newCluster(t)
	f := &requeueFixture{c: c, topic: "requeue-" + randomSuffix(), groupA: "a-" + randomSuffix(), attempts: make(chan attempt, 64)}
	if err := c.createTopic(ctx, f.topic, partitions); err != nil {
		t.Fatal(err)
	}
	f.pa = broker.New("kafka", c.driver(kafka.WithCommitInterval(50*time.Millisecond)), broker.WithRetry(backoff.Policy{MaxAttempts: 5, Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond}))
	if err := f.pa.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.pa.Stop(context.Background()) })
	_, err := f.pa.Listen(ctx, broker.Subscription{Topic: f.topic, Group: f.groupA}, func(_ context.Context, d *broker.Delivery) error {
		_, _, positioned := d.Position()
		id := d.Header(broker.HeaderEventID)
		f.attempts <- attempt{id: id, count: d.RedeliveryCount, positioned: positioned}
		if id == "rq" && d.RedeliveryCount == 0 {
			return errors.New("transient failure")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	db := c.started(t, ctx)
	if f.subB, err = db.Subscribe(ctx, driver.SubscriptionSpec{Topic: f.topic, Group: "b-" + randomSuffix()}); err != nil {
		t.Fatal(err)
	}
	return f
}

// send publishes message id with key k through the port.
func (f *requeueFixture) send(t *testing.T, ctx context.Context, id string) {
	t.Helper()
	m := &broker.Message{Key: "k", Payload: []byte(id), Headers: map[string]string{broker.HeaderEventID: id}}
	if err := f.pa.SendConfirmed(ctx, f.topic, m); err != nil {
		t.Fatal(err)
	}
}

// awaitAttempts collects group A's handler runs until it has run message id
// n times.
func (f *requeueFixture) awaitAttempts(t *testing.T, ctx context.Context, id string, n int) []attempt {
	t.Helper()
	var got []attempt
	for len(got) < n {
		select {
		case a := <-f.attempts:
			if a.id == id {
				got = append(got, a)
			}
		case <-ctx.Done():
			t.Fatalf("group A ran %s %d times, want %d: %+v", id, len(got), n, got)
		}
	}
	return got
}

// TestRequeueIsPrivateToTheGroup: a message group A requeues reaches no
// other group and no other reader of the topic. Message "after" has the key
// of the requeued one and is sent once A has its copy: had the copy gone to
// the topic, it would be in the same partition, before "after", so a reader
// that has "after" would have the copy too.
func TestRequeueIsPrivateToTheGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := newRequeueFixture(t, ctx)
	f.send(t, ctx, "rq")
	f.awaitAttempts(t, ctx, "rq", 2)
	f.send(t, ctx, "after")

	// Group B, through the driver: every delivery its group is given.
	seenB := map[string]int{}
	for seenB["after"] == 0 {
		ds, err := f.subB.Receive(ctx, 16)
		if err != nil {
			t.Fatalf("group B: %v (saw %v)", err, seenB)
		}
		for _, d := range ds {
			seenB[d.Message().Headers[driver.HeaderEventID]]++
			if err := d.Ack(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if seenB["rq"] != 1 {
		t.Errorf("group B was given rq %d times, want once: group A's requeue reached it", seenB["rq"])
	}

	// A plain Kafka consumer of the topic.
	plain, err := kgo.NewClient(kgo.SeedBrokers(f.c.kf.ListenAddrs()...), kgo.ConsumeTopics(f.topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	seen := map[string]int{}
	for seen["after"] == 0 {
		fs := plain.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("plain consumer: %v (saw %v)", err, seen)
		}
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++ })
	}
	if seen["rq"] != 1 {
		t.Errorf("the topic holds %d records of rq, want 1: group A's requeue went to the shared topic", seen["rq"])
	}
}

// TestRequeuedCopyIsRedeliveredToItsGroup: group A gets its requeued copy
// with the redelivery count the port gave it, from the group's retry topic;
// the copy has no log position, since the port names the subscription's
// topic, where its partition and offset are another record's.
func TestRequeuedCopyIsRedeliveredToItsGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := newRequeueFixture(t, ctx)
	f.send(t, ctx, "rq")
	got := f.awaitAttempts(t, ctx, "rq", 2)
	if got[0].count != 0 || !got[0].positioned {
		t.Errorf("first attempt: %+v, want count 0 with a position", got[0])
	}
	if got[1].count != 1 || got[1].positioned {
		t.Errorf("second attempt: %+v, want count 1 without a position", got[1])
	}

	retry := kafka.RetryTopic(f.topic, f.groupA)
	plain, err := kgo.NewClient(kgo.SeedBrokers(f.c.kf.ListenAddrs()...), kgo.ConsumeTopics(retry), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	var copies []*kgo.Record
	for len(copies) == 0 {
		fs := plain.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("nothing on the retry topic %s: %v", retry, err)
		}
		copies = append(copies, fs.Records()...)
	}
	h := map[string]string{}
	for _, x := range copies[0].Headers {
		h[x.Key] = string(x.Value)
	}
	if string(copies[0].Key) != "k" || h[driver.HeaderRedeliveryCount] != "1" || h[driver.HeaderForGroup] != f.groupA {
		t.Errorf("copy on %s: key %q headers %v, want key k, redelivery count 1, for group %s", retry, copies[0].Key, h, f.groupA)
	}

	// Settled: the group's committed position on the retry topic passed it.
	f.c.waitOffsets(t, ctx, f.groupA, func(offs kadm.OffsetResponses) bool {
		o, ok := offs.Lookup(retry, copies[0].Partition)
		return ok && o.At == copies[0].Offset+1
	})
}

// waitOffsets waits until the committed offsets of group are as done wants.
func (c *cluster) waitOffsets(t *testing.T, ctx context.Context, group string, done func(kadm.OffsetResponses) bool) {
	t.Helper()
	for {
		offs, err := c.adm.FetchOffsets(ctx, group)
		if err != nil {
			t.Fatal(err)
		}
		if done(offs) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("committed offsets of %s never as wanted: %v", group, offs)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func TestRetryTopicName(t *testing.T) {
	if got := kafka.RetryTopic("orders", "billing"); got != "orders.msgx-retry.billing" {
		t.Errorf("RetryTopic(orders, billing) = %q", got)
	}
	long := strings.Repeat("t", 240)
	names := map[string]bool{}
	for _, g := range []string{"a/b", "a:b", "a b", "grüppe", strings.Repeat("g", 300), strings.Repeat("g", 301)} {
		for _, topic := range []string{"orders", long} {
			name := kafka.RetryTopic(topic, g)
			if len(name) > 249 || strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != "" {
				t.Errorf("RetryTopic(%q, %q) = %q: not a legal Kafka topic name", topic, g, name)
			}
			if names[name] {
				t.Errorf("RetryTopic(%q, %q) = %q, the name of another group's retry topic", topic, g, name)
			}
			names[name] = true
			if again := kafka.RetryTopic(topic, g); again != name {
				t.Errorf("RetryTopic(%q, %q) is not stable: %q, then %q", topic, g, name, again)
			}
		}
	}
}
