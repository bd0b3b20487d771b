package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/store/storetest"
)

// msgx route with the test controller on: a record POSTed to it comes out on
// the route-in topic, /metrics counts it, and an interrupt stops it cleanly.
func TestRouteCommand(t *testing.T) {
	kf, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer kf.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kf.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sfx := "." + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	topics := []string{"in" + sfx, "dlq" + sfx, "route-in" + sfx, "georef" + sfx}
	if _, err := kadm.NewClient(cl).CreateTopics(ctx, 1, 1, nil, topics...); err != nil {
		t.Fatal(err)
	}
	_, dsn := storetest.NewSchema(t)

	out, w := io.Pipe()
	root := newRoot()
	root.SetOut(w)
	root.SetErr(io.Discard)
	root.SetArgs([]string{"route", "--dsn", dsn, "--kafka", strings.Join(kf.ListenAddrs(), ","), "--group", "g" + sfx,
		"--input-topic", topics[0], "--dlq-topic", topics[1], "--route-in-topic", topics[2], "--georeference-topic", topics[3],
		"--listen", "127.0.0.1:0", "--test-controller"})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(runCtx); _ = w.Close() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("no listening line: %v (%v)", err, <-done)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	base := "http://" + strings.TrimSpace(strings.TrimPrefix(line, "listening on "))

	resp, err := http.Post(base+"/route-processing/test/records", "application/json",
		strings.NewReader(`{"routeId":"R-1","routeNameFull":"n","geometry":{"type":"Point","coordinates":[1234567.891,2]}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("test controller answered %d", resp.StatusCode)
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(kf.ListenAddrs()...), kgo.ConsumeTopics(topics[2]), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var got []*kgo.Record
	for len(got) == 0 && ctx.Err() == nil {
		got = append(got, rd.PollFetches(ctx).Records()...)
	}
	if len(got) != 1 || string(got[0].Key) != "R-1" || !strings.Contains(string(got[0].Value), `"geometryWkt":"POINT (1234567.891 2)"`) {
		t.Fatalf("route-in events: %v", got)
	}
	// The counter moves after the commit whose events were just read: wait
	// for it, within a bound.
	testkit.Eventually(t, "the ingested record in /metrics", 30*time.Second, func() bool {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return strings.Contains(string(body), "route_passport_ingest_success_total 1")
	})
	stop()
	if err := <-done; err != nil {
		t.Fatalf("msgx route: %v", err)
	}
}
