package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/pipeline/sis"
)

func TestDemoRunsTheSISPipelineOnTheEmbeddedDefault(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "demo.db")
	res, err := runDemo(ctx, demoConfig{DSN: dsn, Out: &out})
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	// 172 bundled messages and the composed ADFT: the schedule, the ADFT and
	// the 71 FLOPs, 93 reference messages and 2 SCHS succeed; the 5 REGN
	// ones (ignored by default) are skipped; nothing is dead.
	if res.Messages != 173 || res.ByStatus[inbox.Succeeded] != 168 || res.ByStatus[inbox.Skipped] != 5 || len(res.Dead) != 0 {
		t.Fatalf("result %+v\n%s", res, out.String())
	}
	if len(res.Reasons) != 5 || res.Reasons["ignored:REGN/ADD"] != 1 {
		t.Fatalf("reasons %v", res.Reasons)
	}
	if len(res.Flights) != 4 || res.Flights["15"].Status != sis.StatusDeleted || res.Flights["16"].Status != sis.StatusActive {
		t.Fatalf("flights %v", res.Flights)
	}
	if res.Published["sis.msg"] == 0 || res.Published["sis.msg"] != res.Consumed["sis.msg"] ||
		res.Published["sis.schd"] == 0 || res.Published["sis.schd"] != res.Consumed["sis.schd"] ||
		res.Published["sis.ref"] == 0 || res.Published["sis.ref"] != res.Consumed["sis.ref"] || res.Tombstones != 1 {
		t.Fatalf("events published %v consumed %v tombstones %d", res.Published, res.Consumed, res.Tombstones)
	}
	for _, want := range []string{"SUCCEEDED  168", "flights: 4", "dead letters: none"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("no %q in:\n%s", want, out.String())
		}
	}
	// A second run on the same file processes its own new messages only.
	out.Reset()
	res, err = runDemo(ctx, demoConfig{DSN: dsn, Out: &out})
	if err != nil {
		t.Fatalf("second demo: %v", err)
	}
	if res.ByStatus[inbox.Succeeded] != 168 || res.ByStatus[inbox.Skipped] != 5 {
		t.Fatalf("second run %+v", res)
	}
}
