package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// run runs the command line args in process and returns what it printed.
func run(t *testing.T, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	root := newRoot()
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("msgx-bench %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

func TestBrokerMemPrintsResultLines(t *testing.T) {
	out := run(t, "broker", "--adapter", "mem", "--n", "500", "--batch", "50")
	for _, v := range []string{"raw-publish", "raw-consume", "port-publish", "port-consume"} {
		if !strings.Contains(out, "RESULT peer=msgx workload=broker variant="+v+" ") {
			t.Errorf("no RESULT line for %s in:\n%s", v, out)
		}
	}
}
