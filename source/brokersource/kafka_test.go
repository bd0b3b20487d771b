package brokersource_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/kafka"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/source/brokersource"
	"github.com/msgx/msgx/source/mailbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// A message over the source's limit whose dead-letter copy exceeds the
// producer's limit (the input topic takes larger messages than msgx sends)
// is dead-lettered by reference, and the source goes on with the next one:
// it does not come back for ever.
func TestOversizedDeadLetterByReferenceOnKafka(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kf, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kf.Close)
	topic := storetest.UniqueName("bsrc")
	cl, err := kgo.NewClient(kgo.SeedBrokers(kf.ListenAddrs()...), kgo.ProducerBatchMaxBytes(4<<20))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, 1, -1, map[string]*string{"max.message.bytes": kadm.StringPtr("4194304")}, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, 505_050)
	_, _ = rand.Read(raw)
	big := []byte(hex.EncodeToString(raw)) // 1 010 100 bytes the producer's compression leaves as they are
	for _, v := range [][]byte{big, []byte("C")} {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: v}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	log := testkit.Quiet()
	b := broker.New("kafka", kafka.New(kafka.SeedBrokers(kf.ListenAddrs()...), kafka.WithLogger(log),
		kafka.WithCommitInterval(100*time.Millisecond), kafka.WithMaxMessageBytes(1_000_012)), broker.WithLogger(log))
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop(context.Background()) })
	db := storetest.NewPostgres(t, store.WithMigrate(mailbox.Schema()))
	src, err := brokersource.New(b, broker.Subscription{Topic: topic, Group: "msgx"}, db, "s",
		brokersource.WithMaxBytes(1000), brokersource.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- src.Run(sctx, nil) }()
	defer func() { stop(); <-done }()

	testkit.Eventually(t, "C in the inbox", patience, func() bool { rs := rows(t, db, "s"); return len(rs) == 1 && rs[0].payload == "C" })
	dlq, err := kgo.NewClient(kgo.SeedBrokers(kf.ListenAddrs()...), kgo.ConsumeTopics(topic+".dlq"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dlq.Close)
	var dead *kgo.Record
	for dead == nil && ctx.Err() == nil {
		dlq.PollFetches(ctx).EachRecord(func(r *kgo.Record) { dead = r })
	}
	if dead == nil {
		t.Fatal("no dead letter")
	}
	h := map[string]string{}
	for _, kv := range dead.Headers {
		h[kv.Key] = string(kv.Value)
	}
	sum := sha256.Sum256(big)
	if len(dead.Value) != 0 || h[broker.HeaderDeadPayloadSize] != "1010100" || h[broker.HeaderDeadPayloadSHA256] != hex.EncodeToString(sum[:]) ||
		h[broker.HeaderDeadTopic] != topic || h[broker.HeaderDeadPartition] != "0" || h[broker.HeaderDeadOffset] != "0" ||
		h[broker.HeaderDeadPayloadOmitted] == "" || h[broker.HeaderDeadClass] != "poison" {
		t.Fatalf("dead letter of %d bytes, headers %v", len(dead.Value), h)
	}
}
