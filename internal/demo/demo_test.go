package demo

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDemoRunsEndToEndOnTheEmbeddedDefault(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "demo.db")
	res, err := Run(ctx, Config{DSN: dsn, N: 120, Flights: 7, Out: &out})
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	if res.Processed != 120 || res.Events != 120 || res.OrderViolations != 0 {
		t.Fatalf("result %+v", res)
	}
	if !strings.Contains(out.String(), "done: 120 messages SUCCEEDED") {
		t.Fatalf("output:\n%s", out.String())
	}
	// A second run on the same file processes its own new messages only.
	res, err = Run(ctx, Config{DSN: dsn, N: 30, Flights: 3, Out: &out})
	if err != nil {
		t.Fatalf("second demo: %v", err)
	}
	if res.Processed != 30 || res.Events != 30 {
		t.Fatalf("second run %+v", res)
	}
}
