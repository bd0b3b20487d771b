package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// In the outbox's WAL mode the route-passport pipeline runs no relay of its
// own: its two targets are lanes of the service's WAL relay, so its events
// stream from the service's slot and never touch msgx_outbox. Every record's
// two events arrive, each route's in the order of its records.
func TestRoutePipelineOnTheServicesWALRelay(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	schema, dsn := storetest.NewSchema(t)
	kf, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kf.Close)
	cl := mustClient(t, kf.ListenAddrs())
	sfx := strings.ToLower(schema[len(schema)-12:])
	topics := []string{"rp-in-" + sfx, "rp-dlq-" + sfx, "rp-route-in-" + sfx, "rp-georef-" + sfx}
	if _, err := kadm.NewClient(cl).CreateTopics(ctx, 1, 1, nil, topics...); err != nil {
		t.Fatal(err)
	}
	slot := storetest.UniqueName("msgx_t_")
	t.Cleanup(func() { dropSlot(t, slot) })
	yml := fmt.Sprintf(`store: {dsn: %q}
admin: {listen: "127.0.0.1:0", read-token: %q, operator-token: %q}
ingress: {listen: ""}
brokers: {k: {kind: kafka, seeds: [%q]}}
outbox: {mode: wal, slot: %s}
pipelines:
  routepassport:
    broker: k
    options: {group: g-%s, input-topic: %s, dead-letter-topic: %s, route-in-topic: %s, georeference-topic: %s}
`, dsn, readTok, opTok, kf.ListenAddrs()[0], slot, sfx, topics[0], topics[1], topics[2], topics[3])
	_, stop := runApp(t, "the service", yml)
	defer stop()

	const routes, versions = 10, 3
	var recs []*kgo.Record
	for v := range versions {
		for r := range routes {
			id := fmt.Sprintf("R-%d", r)
			recs = append(recs, &kgo.Record{Topic: topics[0], Key: []byte(id), Value: []byte(fmt.Sprintf(
				`{"routeId":%q,"routeNameFull":"v%d","geometry":{"type":"Point","coordinates":[%d,%d]}}`, id, v, r, v))})
		}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for _, topic := range topics[2:] {
		got := readTopic(ctx, t, kf.ListenAddrs(), topic, len(recs))
		seen := map[string]int{}
		for _, r := range got {
			var v int
			if _, err := fmt.Sscanf(between(string(r.Value), `"routeNameFull":"v`, `"`), "%d", &v); err != nil {
				t.Fatalf("%s: event %s: %v", topic, r.Value, err)
			}
			if last, ok := seen[string(r.Key)]; ok && v != last+1 || !ok && v != 0 {
				t.Errorf("%s: route %s: version %d after %d", topic, r.Key, v, last)
			}
			seen[string(r.Key)] = v
		}
		if len(seen) != routes {
			t.Errorf("%s: %d routes, want %d", topic, len(seen), routes)
		}
	}
	db, err := store.Open(ctx, dsn, store.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, table := range []string{"msgx_outbox", "msgx_outbox_sent"} {
		if n := countOf(t, db, "SELECT count(*) FROM "+table); n != 0 {
			t.Errorf("%s holds %d rows: the route events went through the table", table, n)
		}
	}
}

// readTopic reads n records of topic from the start, failing after ctx.
func readTopic(ctx context.Context, t *testing.T, seeds []string, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s: %d of %d records before the deadline", topic, len(out), n)
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

// between is the text of s after the first before and up to the next after.
func between(s, before, after string) string {
	_, rest, _ := strings.Cut(s, before)
	v, _, _ := strings.Cut(rest, after)
	return v
}
