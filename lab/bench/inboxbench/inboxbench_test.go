package inboxbench_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/msgx/msgx/lab/bench/inboxbench"
	"github.com/msgx/msgx/store/storetest"
)

// TestRunSmall runs both variants on a small N: the RESULT lines come out
// and the run's own checks (all SUCCEEDED, one event each, FIFO) pass.
func TestRunSmall(t *testing.T) {
	n := 600
	if s := os.Getenv("MSGX_INBOXBENCH_N"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	var out bytes.Buffer
	res, err := inboxbench.Run(context.Background(), inboxbench.Config{DSN: storetest.PostgresURL(), N: n, FLIDs: 50, Backfill: true}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || !strings.Contains(out.String(), "variant=group") || !strings.Contains(out.String(), "variant=single") {
		t.Fatalf("output:\n%s", out.String())
	}
	t.Log("\n" + out.String())
}

// TestRunBothProcessors runs the toy and the SIS processor on a small N:
// their RESULT lines and the sis/toy ratio come out, and the real
// processor's run passes its checks (every message SUCCEEDED against the
// seeded flights, msg events in message order).
func TestRunBothProcessors(t *testing.T) {
	var out bytes.Buffer
	res, err := inboxbench.Run(context.Background(), inboxbench.Config{DSN: storetest.PostgresURL(), N: 400, FLIDs: 20,
		Backfill: true, Variants: []string{"group"}, Processors: []string{"toy", "sis"}}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if len(res) != 2 || !strings.Contains(out.String(), "processor=sis") || !strings.Contains(out.String(), "RATIO workload=inbox-fifo group sis/toy=") {
		t.Fatalf("output:\n%s", out.String())
	}
	t.Log("\n" + out.String())
}

// TestRunRounds runs two rounds, the second in reversed order: every
// variant runs once a round, each round's ratio comes out, and the median
// line names the rounds it was taken over.
func TestRunRounds(t *testing.T) {
	var out bytes.Buffer
	res, err := inboxbench.Run(context.Background(), inboxbench.Config{DSN: storetest.PostgresURL(), N: 200, FLIDs: 20,
		Backfill: true, Variants: []string{"group", "raw"}, Rounds: 2}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	var order []string
	for _, r := range res {
		order = append(order, r.Variant)
	}
	if !slices.Equal(order, []string{"group", "raw", "raw", "group"}) {
		t.Fatalf("variants ran in order %v", order)
	}
	if n := strings.Count(out.String(), "RATIO workload=inbox-fifo group/raw="); n != 3 {
		t.Fatalf("%d group/raw ratio lines, want 2 rounds and the median:\n%s", n, out.String())
	}
	if !regexp.MustCompile(`RATIO workload=inbox-fifo group/raw=[0-9.]+ rounds=2 min=[0-9.]+ max=[0-9.]+ median=true`).MatchString(out.String()) {
		t.Fatalf("no median line:\n%s", out.String())
	}
	// A variant listed twice would pair a result with itself.
	if _, err := inboxbench.Run(context.Background(), inboxbench.Config{DSN: storetest.PostgresURL(), N: 10,
		Variants: []string{"group", "raw", "group"}}, io.Discard); err == nil {
		t.Fatal("a variant listed twice was accepted")
	}
}
