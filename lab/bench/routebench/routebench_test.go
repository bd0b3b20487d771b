package routebench_test

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/lab/bench/routebench"
	"github.com/msgx/msgx/store/storetest"
)

// TestRunBothVariants runs the end-to-end and the ingest variant on a few
// records against real PostgreSQL and kfake: each run's own checks (every
// record stored; every event on its topic, or written to the outbox when the
// relay is off) pass, and the ratio follows the RESULT lines.
func TestRunBothVariants(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	res, err := routebench.Run(ctx, routebench.Config{DSN: storetest.PostgresURL(), N: 300, Routes: 40, Points: 3,
		Partitions: 2, Batch: 50, Poll: 20 * time.Millisecond, Variants: []string{"e2e", "ingest"}}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if len(res) != 2 || res[0].Variant != "e2e" || res[1].Variant != "ingest" {
		t.Fatalf("results %+v", res)
	}
	for _, want := range []string{
		`RESULT peer=msgx workload=route-ingest variant=e2e mode=burndown n=300 .* ingested=300 events=600 `,
		`RESULT peer=msgx workload=route-ingest variant=ingest mode=burndown n=300 .* ingested=300 events=600 `,
		`RATIO workload=route-ingest e2e/ingest=[0-9.]+\n`,
	} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Fatalf("no line like %q in:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "median=true") {
		t.Fatalf("a median after one round:\n%s", out.String())
	}
}

func TestVariantsAreChecked(t *testing.T) {
	cfg := routebench.Config{N: 10, Routes: 1, Points: 2, Partitions: 1, Batch: 1}
	for _, vs := range [][]string{{"e2e", "raw"}, {"ingest", "ingest"}} {
		cfg.Variants = vs
		if _, err := routebench.Run(context.Background(), cfg, &bytes.Buffer{}); err == nil {
			t.Errorf("variants %v accepted", vs)
		}
	}
}
