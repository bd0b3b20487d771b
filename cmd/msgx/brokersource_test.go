package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/pipeline/sis/traffic"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// inboxRow is what the broker-source test reads of a stream's inbox.
type inboxRow struct {
	id      int64
	payload []byte
	status  inbox.Status
	reason  string
}

func inboxRows(t *testing.T, ctx context.Context, db *store.DB, stream string) []inboxRow {
	t.Helper()
	rows, err := db.Query(ctx, "SELECT msg_id, payload, status, COALESCE(reason, '') FROM msgx_inbox WHERE stream = $1 ORDER BY msg_id", stream)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []inboxRow
	for rows.Next() {
		var r inboxRow
		var st string
		if err := rows.Scan(&r.id, &r.payload, &st, &r.reason); err != nil {
			t.Fatal(err)
		}
		r.status = inbox.Status(st)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestServeBrokerSource runs the real binary with a stream fed by a Kafka
// listener (kfake) and no mailbox: the bundled SIS traffic published to a
// topic is processed by the SIS processor once per message, through a
// kill -9 while messages are in flight (deliveries whose offsets were not
// committed come again) and a rewind of the consumer group to the start
// (every message comes again): each message has one processed inbox row,
// every redelivery is SKIPPED as a duplicate of it, and the outbox holds
// events of the processed rows only.
func TestServeBrokerSource(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bin := buildMsgx(t)
	_, pgDSN := storetest.NewSchema(t)
	kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "sis.in"), kfake.SeedTopics(3, "sis.msg"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kf.Close)
	seeds := kf.ListenAddrs()

	cfgPath := filepath.Join(t.TempDir(), "msgx.yaml")
	cfg := fmt.Sprintf(`profile: production
instance-id: msgx-test
log: {level: info, format: json}
store: {dsn: %q, max-conns: 8}
admin: {listen: "127.0.0.1:0", read-token: %q, operator-token: %q}
brokers:
  main: {kind: kafka, seeds: [%s], compacted-topics: [sis.schd]}
streams:
  sis:
    processor: sis
    poll-interval: 100ms
    sources:
      feed: {kind: broker, broker: main, topic: sis.in, group: msgx-sis}
relay:
  targets:
    "kafka:msg": {broker: main, lane: per-key}
    "kafka:ref": {broker: main, lane: per-key}
    "kafka:schd": {broker: main, lane: compacted}
`, pgDSN, readTok, opTok, strings.Join(seeds, ", "))
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(ctx, pgDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	msgs, err := traffic.Ordered(time.Now().UnixNano() % 1_000_000_000)
	if err != nil {
		t.Fatal(err)
	}
	prod := mustClient(t, seeds)
	publish := func(batch [][]byte) {
		t.Helper()
		recs := make([]*kgo.Record, len(batch))
		for i, m := range batch {
			recs[i] = &kgo.Record{Topic: "sis.in", Value: m}
		}
		if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// settled waits until every row of the stream is terminal, there are at
	// least n of them, and the first distinct of msgs each have one:
	// redeliveries add rows, so a count alone can be reached while messages
	// are still on their way.
	settled := func(what string, n, distinct int) []inboxRow {
		t.Helper()
		var rows []inboxRow
		testkit.Eventually(t, what, 90*time.Second, func() bool {
			rows = inboxRows(t, ctx, db, "sis")
			seen := make(map[string]bool, len(rows))
			for _, r := range rows {
				if !r.status.Terminal() {
					return false
				}
				seen[string(r.payload)] = true
			}
			for _, m := range msgs[:distinct] {
				if !seen[string(m)] {
					return false
				}
			}
			return len(rows) >= n
		})
		return rows
	}
	// check wants one processed row per message with the outcome expected of
	// it, and every other row of the message SKIPPED as its duplicate.
	check := func(rows []inboxRow) (processed map[int64]bool) {
		t.Helper()
		processed = map[int64]bool{}
		for _, m := range msgs {
			var owner int64
			var dups []inboxRow
			for _, r := range rows {
				if !bytes.Equal(r.payload, m) {
					continue
				}
				if owner == 0 {
					owner = r.id
					if st, reason := expectedOutcome(t, m); r.status != st || r.reason != reason {
						t.Errorf("message %d: %s %q, want %s %q", r.id, r.status, r.reason, st, reason)
					}
					processed[r.id] = true
					continue
				}
				dups = append(dups, r)
			}
			if owner == 0 {
				t.Errorf("a message never reached the inbox: %.120s", m)
			}
			for _, d := range dups {
				if d.status != inbox.Skipped || d.reason != fmt.Sprintf("duplicate-of:%d", owner) {
					t.Errorf("redelivery %d of message %d: %s %q, want SKIPPED duplicate-of:%d", d.id, owner, d.status, d.reason, owner)
				}
			}
		}
		if len(rows) < len(msgs) {
			t.Errorf("%d inbox rows for %d messages", len(rows), len(msgs))
		}
		return processed
	}
	// events counts the outbox's events (sent or not) by id.
	events := func() map[string]int {
		t.Helper()
		rs, err := db.Query(ctx, "SELECT event_id FROM msgx_outbox_sent UNION ALL SELECT event_id FROM msgx_outbox")
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Close()
		out := map[string]int{}
		for rs.Next() {
			var id string
			if err := rs.Scan(&id); err != nil {
				t.Fatal(err)
			}
			out[id]++
		}
		return out
	}

	svc := startServiceWith(t, bin, cfgPath, false, nil)
	publish(msgs[:60])
	settled("the first 60 messages", 60, 60)

	// kill -9 while the rest goes in: the offsets of deliveries the inbox
	// committed may not be committed to Kafka yet.
	publish(msgs[60:])
	testkit.Eventually(t, "more messages in the inbox", 60*time.Second, func() bool { return len(inboxRows(t, ctx, db, "sis")) > 70 })
	if err := svc.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-svc.exited
	svc = startServiceWith(t, bin, cfgPath, false, nil)
	rows := settled("every message after the kill", len(msgs), len(msgs))
	processed := check(rows)
	t.Logf("after the kill: %d inbox rows for %d messages", len(rows), len(msgs))
	before := events()
	svc.stop(t)

	// Every message again: the group rewound to the start. Its member is
	// static (instance-id) and stays in the group after the stop until it is
	// removed, as an operator does before resetting a group's offsets.
	adm := kadm.NewClient(mustClient(t, seeds))
	if resp, err := adm.LeaveGroup(ctx, kadm.LeaveGroup("msgx-sis").InstanceIDs("msgx-test.sis.in")); err != nil || resp.Error() != nil {
		t.Fatalf("remove the static member: %v %v", err, resp.Error())
	}
	var rewind kadm.Offsets
	rewind.Add(kadm.Offset{Topic: "sis.in", Partition: 0, At: 0, LeaderEpoch: -1})
	if resp, err := adm.CommitOffsets(ctx, "msgx-sis", rewind); err != nil || resp.Error() != nil {
		t.Fatalf("rewind the group: %v %v", err, resp.Error())
	}
	svc = startServiceWith(t, bin, cfgPath, false, nil)
	rows = settled("every message delivered again", len(rows)+len(msgs), len(msgs))
	if again := check(rows); len(again) != len(processed) {
		t.Errorf("%d messages processed after the rewind, %d before", len(again), len(processed))
	}
	// The redeliveries had no effect: no event of a new row, none added.
	after := events()
	msgEvents := 0
	for id, n := range after {
		if m := eventMsgID(id); m != 0 {
			msgEvents++
			if !processed[m] {
				t.Errorf("event %s of inbox row %d, which is not a processed message", id, m)
			}
		}
		if n != 1 || before[id] != 1 {
			t.Errorf("event %s: %d times before the rewind, %d after", id, before[id], n)
		}
	}
	if len(after) != len(before) || msgEvents == 0 {
		t.Errorf("%d events before the rewind, %d after (%d of messages)", len(before), len(after), msgEvents)
	}
	code, metrics := svc.get(t, "/metrics", "")
	if code != 200 || !bytes.Contains(metrics, []byte(`msgx_source_broker_received_total{source="feed",stream="sis"}`)) {
		t.Errorf("/metrics lacks the source's counters: %d", code)
	}
	svc.stop(t)
}
