package kafka_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/broker/kafka"
)

// The crash tests run their consumers as child processes of the test binary
// and kill them with SIGKILL: a killed member sends no LeaveGroup and no
// last commit, exactly as a crashed msgx does.
const childEnv = "MSGX_KAFKA_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(consumerChild())
	}
	os.Exit(m.Run())
}

// consumerChild subscribes as the environment says, prints "subscribed",
// then "got <payload>" for every record it acknowledges, until it is killed
// (or two minutes have passed: a child the test forgot does not linger).
func consumerChild() int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	session, err := time.ParseDuration(os.Getenv(childEnv + "_SESSION"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	opts := []kafka.Option{
		kafka.SeedBrokers(strings.Split(os.Getenv(childEnv+"_SEEDS"), ",")...),
		kafka.WithLogger(testLogger()),
		kafka.WithSessionTimeout(session),
		kafka.WithCommitInterval(100 * time.Millisecond),
		kafka.WithFetchMaxWait(100 * time.Millisecond),
	}
	if id := os.Getenv(childEnv + "_INSTANCE"); id != "" {
		opts = append(opts, kafka.WithInstanceID(id))
	}
	d := kafka.New(opts...)
	if err := d.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	sub, err := d.Subscribe(ctx, driver.SubscriptionSpec{Topic: os.Getenv(childEnv + "_TOPIC"), Group: os.Getenv(childEnv + "_GROUP"), Prefetch: 16})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Println("subscribed")
	for {
		ds, err := sub.Receive(ctx, 16)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		for _, dl := range ds {
			if err := dl.Ack(ctx); err != nil {
				fmt.Fprintln(os.Stderr, err)
				continue
			}
			fmt.Println("got " + string(dl.Message().Payload))
		}
	}
}

// child is a running consumer process and the lines it printed.
type child struct {
	cmd   *exec.Cmd
	lines chan string
	seen  map[string]bool // lines taken off the channel (by await only)
}

func startChild(t *testing.T, seeds []string, topic, group, instance string, session time.Duration) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(),
		childEnv+"=1",
		childEnv+"_SEEDS="+strings.Join(seeds, ","),
		childEnv+"_TOPIC="+topic,
		childEnv+"_GROUP="+group,
		childEnv+"_INSTANCE="+instance,
		childEnv+"_SESSION="+session.String(),
	)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, lines: make(chan string, 1024), seen: map[string]bool{}}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	t.Cleanup(c.kill)
	return c
}

// kill is kill -9, then the reaping of the process.
func (c *child) kill() {
	if c.cmd.ProcessState != nil {
		return
	}
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
}

// await waits at most limit until the child has printed every line of
// want; false if it has not (or has exited).
func (c *child) await(limit time.Duration, want ...string) bool {
	missing := map[string]bool{}
	for _, w := range want {
		if !c.seen[w] {
			missing[w] = true
		}
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for len(missing) > 0 {
		select {
		case l, ok := <-c.lines:
			if !ok {
				return false
			}
			c.seen[l] = true
			delete(missing, l)
		case <-timer.C:
			return false
		}
	}
	return true
}

// crashFixture is a topic of several partitions on a one-broker kfake and a
// producer writing one record to each partition.
type crashFixture struct {
	kf    *kfake.Cluster
	topic string
	group string
	pr    *kgo.Client
}

func newCrashFixture(t *testing.T) *crashFixture {
	t.Helper()
	f := &crashFixture{topic: "crash-" + randomSuffix(), group: "g-" + randomSuffix()}
	var err error
	if f.kf, err = kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, f.topic)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.kf.Close)
	if f.pr, err = kgo.NewClient(kgo.SeedBrokers(f.kf.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner())); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.pr.Close)
	return f
}

// produce writes <label>-p<n> to partition n of every partition and
// returns the lines a consumer prints for them.
func (f *crashFixture) produce(t *testing.T, ctx context.Context, label string) []string {
	t.Helper()
	var want []string
	for p := int32(0); p < partitions; p++ {
		v := fmt.Sprintf("%s-p%d", label, p)
		if err := f.pr.ProduceSync(ctx, &kgo.Record{Topic: f.topic, Partition: p, Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		want = append(want, "got "+v)
	}
	return want
}

// crashAndRestart runs a member A that owns every partition, kills it with
// SIGKILL, starts its replacement B under the same instance id (none for a
// dynamic member) and returns B's subscription and the records written
// once B has subscribed.
func (f *crashFixture) crashAndRestart(t *testing.T, ctx context.Context, instance string, session time.Duration) (*child, []string) {
	t.Helper()
	a := startChild(t, f.kf.ListenAddrs(), f.topic, f.group, instance, session)
	if !a.await(30*time.Second, "subscribed") {
		t.Fatal("member A did not subscribe within 30 s")
	}
	if !a.await(30*time.Second, f.produce(t, ctx, "before")...) {
		t.Fatal("member A did not consume every partition within 30 s")
	}
	a.kill()
	b := startChild(t, f.kf.ListenAddrs(), f.topic, f.group, instance, session)
	if !b.await(30*time.Second, "subscribed") {
		t.Fatal("member B did not subscribe within 30 s")
	}
	return b, f.produce(t, ctx, "after")
}

// The session is long enough that waiting it out is unmistakable, and the
// bound on a static rejoin is half of it.
const crashSession = 12 * time.Second

// A member killed with SIGKILL and restarted under the same instance id
// takes back every partition at once: no wait for the dead member's session
// to expire, no rebalance.
func TestRestartedStaticMemberTakesItsPartitionsBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := newCrashFixture(t)
	b, want := f.crashAndRestart(t, ctx, "host-a", crashSession)
	start := time.Now()
	if !b.await(crashSession/2, want...) {
		t.Fatalf("the restarted static member did not consume every partition within %s of subscribing (session %s)", crashSession/2, crashSession)
	}
	t.Logf("the restarted static member consumed every partition %s after subscribing", time.Since(start).Round(time.Millisecond))
}

// The control: without an instance id the same restart is a new member,
// and the group gives it the partitions only once the dead member's
// session has expired. (This is what the test above would see without
// static membership.)
func TestRestartedDynamicMemberWaitsForTheSession(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := newCrashFixture(t)
	b, want := f.crashAndRestart(t, ctx, "", crashSession)
	start := time.Now()
	if b.await(crashSession/2, want...) {
		t.Fatalf("a new dynamic member consumed every partition within %s: the dead member's session (%s) did not hold them", crashSession/2, crashSession)
	}
	if !b.await(crashSession+30*time.Second, want...) {
		t.Fatalf("the new member did not get the partitions after the session expired")
	}
	t.Logf("the new dynamic member consumed every partition %s after subscribing", time.Since(start).Round(time.Millisecond))
}

// Two subscriptions of one topic and group in one process get distinct
// static member ids (a shared one would fence one of them out), made of the
// instance id and the topic; another group reuses the plain id, and a closed
// subscription's id is free again.
func TestStaticMemberIDs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newCluster(t)
	topic, group := "members-"+randomSuffix(), "g-"+randomSuffix()
	if err := c.createTopic(ctx, topic, partitions); err != nil {
		t.Fatal(err)
	}
	d := c.started(t, ctx, kafka.WithInstanceID("host-1"))
	subscribe := func(group string) driver.Subscription {
		sub, err := d.Subscribe(ctx, driver.SubscriptionSpec{Topic: topic, Group: group})
		if err != nil {
			t.Fatal(err)
		}
		return sub
	}
	first, second, other := subscribe(group), subscribe(group), subscribe("other-"+group)
	for sub, want := range map[driver.Subscription]string{first: "host-1." + topic, second: "host-1." + topic + "-2", other: "host-1." + topic} {
		if got := kafka.MemberInstanceID(sub); got != want {
			t.Errorf("member instance id %q, want %q", got, want)
		}
	}
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := kafka.MemberInstanceID(subscribe(group)); got != "host-1."+topic {
		t.Errorf("after a close, member instance id %q, want the freed %q", got, "host-1."+topic)
	}
}

func TestStartRefusesAnInvalidInstanceID(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newCluster(t)
	for _, id := range []string{"host 1", "host:8081", "hôte", strings.Repeat("x", 201)} {
		d := c.driver(kafka.WithInstanceID(id))
		err := d.Start(ctx)
		if err == nil || !strings.Contains(err.Error(), "instance id") {
			t.Errorf("Start with instance id %q: %v, want an instance id error", id, err)
		}
		_ = d.Close(ctx)
	}
}
