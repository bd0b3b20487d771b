package sis_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/kafka"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/pipeline/sis"
)

// kafkaEnv is an in-process Kafka cluster (kfake) with the two topics of a
// test: msg, and schd created with cleanup.policy=compact.
type kafkaEnv struct {
	addrs          []string
	msgTopic, schd string
	adm            *kadm.Client
	broker         *broker.Broker
	cfg            sis.Config
}

func newKafkaEnv(t *testing.T) *kafkaEnv {
	t.Helper()
	ctx := context.Background()
	kf, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(kf.Close)
	var b [4]byte
	_, _ = rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	e := &kafkaEnv{addrs: kf.ListenAddrs(), msgTopic: "sis.msg." + suffix, schd: "sis.schd." + suffix}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.addrs...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	e.adm = kadm.NewClient(cl)
	e.cfg = sis.Config{MsgTopic: e.msgTopic, SchdTopic: e.schd, SchdFlushPeriod: 100 * time.Millisecond}
	e.broker = broker.New("kafka", kafka.New(kafka.SeedBrokers(e.addrs...), kafka.WithLogger(testkit.Quiet()),
		// The schd topic is created compacted, as the service does it
		// (brokers.NAME.compacted-topics).
		kafka.WithTopic(e.msgTopic, 4, nil),
		kafka.WithTopic(e.schd, 4, map[string]string{"cleanup.policy": "compact"})), broker.WithLogger(testkit.Quiet()))
	if err := e.broker.Start(ctx); err != nil {
		t.Fatalf("kafka broker: %v", err)
	}
	t.Cleanup(func() { _ = e.broker.Stop(context.Background()) })
	return e
}

// runRelay relays the pipeline's events from p's store to Kafka.
func (e *kafkaEnv) runRelay(t *testing.T, p *pipe) {
	t.Helper()
	relay, err := outbox.NewRelay(p.db, append(sis.RelayTargets(e.broker, e.cfg),
		outbox.WithLogger(testkit.Quiet()), outbox.WithPollInterval(20*time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && ctx.Err() == nil {
			t.Errorf("relay: %v", err)
		}
		relay.Close()
	})
}

// record is a Kafka record as a consumer sees it.
type record struct {
	topic, key string
	value      []byte
}

// consume reads the topics from the start with a plain franz-go client
// until cond holds for what it read (bounded).
func (e *kafkaEnv) consume(t *testing.T, cond func([]record) bool) []record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.addrs...), kgo.ConsumeTopics(e.msgTopic, e.schd),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var got []record
	for !cond(got) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumer: not all events within the time limit; read %d: %+v", len(got), got)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Logf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			got = append(got, record{r.Topic, string(r.Key), r.Value})
		})
	}
	return got
}

// TestEndToEndMailboxToKafka: messages written into the MariaDB mailbox come
// out as flight state in PostgreSQL and as events on Kafka — the schd topic
// compacted — with the processed mark written back, read by a plain Kafka
// client.
func TestEndToEndMailboxToKafka(t *testing.T) {
	e := newKafkaEnv(t)
	cfgs, err := e.adm.DescribeTopicConfigs(context.Background(), e.schd)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := cfgs.On(e.schd, nil); err != nil || !slices.ContainsFunc(c.Configs, func(k kadm.Config) bool {
		return k.Key == "cleanup.policy" && k.Value != nil && *k.Value == "compact"
	}) {
		t.Fatalf("schd topic is not compacted: %+v %v", c, err)
	}
	p := newPipe(t, e.cfg)
	e.runRelay(t, p)
	gtdt := replace(t, fixture(t, "FLOP_GTDT_1.xml"), "<FLID>121112312</FLID>", "<FLID>15</FLID>")
	ids := p.put(fixture(t, "SCHD_DNLD_1.xml"), gtdt, fixture(t, "FLOP_FDEL_1.xml"))
	if got := outcomes(p.settle(ids...)); !slices.Equal(got, []outcome{succeeded, succeeded, succeeded}) {
		t.Fatalf("outcomes %+v", got)
	}
	if got := p.marks(ids...); !slices.Equal(got, []string{"DONE", "DONE", "DONE"}) {
		t.Fatalf("processed marks %v", got)
	}
	if f := p.harness().flight("15"); f.Status != sis.StatusDeleted || f.Version != 3 {
		t.Fatalf("flight 15 in PostgreSQL: %+v", f)
	}
	lastSchd := func(rs []record) map[string]record {
		out := map[string]record{}
		for _, r := range rs {
			if r.topic == e.schd {
				out[r.key] = r
			}
		}
		return out
	}
	recs := e.consume(t, func(rs []record) bool {
		msgs := 0
		for _, r := range rs {
			if r.topic == e.msgTopic {
				msgs++
			}
		}
		last := lastSchd(rs)
		return msgs >= 4 && last["15"].topic != "" && last["15"].value == nil && last["16"].topic != ""
	})
	// msg: one event per change, in per-flight order.
	var versions []string
	for _, r := range recs {
		if r.topic != e.msgTopic {
			continue
		}
		var m sis.MsgEvent
		if err := json.Unmarshal(r.value, &m); err != nil {
			t.Fatalf("msg event %s: %v", r.value, err)
		}
		if m.Schema != sis.SchemaMsg || m.FLID != r.key {
			t.Fatalf("msg event %+v under key %s", m, r.key)
		}
		versions = append(versions, r.key+"@"+m.Kind+"#"+itoa(m.StateVersion))
	}
	slices.Sort(versions)
	if want := []string{"15@FLOP/FDEL#3", "15@FLOP/GTDT#2", "15@SCHD/DNLD#1", "16@SCHD/DNLD#1"}; !slices.Equal(versions, want) {
		t.Fatalf("msg events %v, want %v", versions, want)
	}
	var s sis.SchdEvent
	if err := json.Unmarshal(lastSchd(recs)["16"].value, &s); err != nil || s.Schema != sis.SchemaSchd || s.StateVersion != 1 || s.Fields["FLNO"] != "YG9061" {
		t.Fatalf("schd state of 16: %+v %v", s, err)
	}
}

// TestKcatReadsTheEvents: librdkafka's command-line client reads the events
// msgx published.
func TestKcatReadsTheEvents(t *testing.T) {
	bin, err := exec.LookPath("kcat")
	if err != nil {
		if bin, err = exec.LookPath("kafkacat"); err != nil {
			t.Skip("neither kcat nor kafkacat is installed (Debian package kcat); the franz-go consumer of TestEndToEndMailboxToKafka reads the same events")
		}
	}
	e := newKafkaEnv(t)
	p := newPipe(t, e.cfg)
	e.runRelay(t, p)
	ids := p.put(fixture(t, "SCHD_DNLD_1.xml"), fixture(t, "FLOP_FDEL_1.xml"))
	p.settle(ids...)
	e.consume(t, func(rs []record) bool { return len(rs) >= 5 }) // the events are on Kafka
	read := func(topic string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		var out, errb bytes.Buffer
		cmd := exec.CommandContext(ctx, bin, "-C", "-b", strings.Join(e.addrs, ","), "-t", topic, "-o", "beginning", "-e", "-q",
			"-f", "%k|%S|%s\n")
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s: %v\n%s", bin, err, errb.String())
		}
		return out.String()
	}
	msgs := read(e.msgTopic)
	for _, want := range []string{`15|`, `16|`, `"schema":"msgx.sis.msg/v1"`, `"kind":"FLOP/FDEL"`} {
		if !strings.Contains(msgs, want) {
			t.Fatalf("kcat read from %s:\n%s\nno %q", e.msgTopic, msgs, want)
		}
	}
	schd := read(e.schd)
	if !strings.Contains(schd, `"schema":"msgx.sis.schd/v1"`) || !strings.Contains(schd, "15|-1|") {
		t.Fatalf("kcat read from %s (want the state of 16 and a tombstone, size -1, for 15):\n%s", e.schd, schd)
	}
}
