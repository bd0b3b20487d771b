package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/msgx/msgx/admin"
)

func run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := execute(args...)
	if err != nil {
		t.Fatalf("msgx %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// execute runs the command line args in process and returns what it printed
// and its error.
func execute(args ...string) (string, error) {
	var out bytes.Buffer
	root := newRoot()
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

func TestVersion(t *testing.T) {
	if out := run(t, "version"); !strings.HasPrefix(out, "msgx ") {
		t.Fatalf("version printed %q", out)
	}
}

func TestMigrateSQLite(t *testing.T) {
	out := run(t, "migrate", "--dsn", "sqlite:"+t.TempDir()+"/m.db")
	if !strings.Contains(out, "schema at version") {
		t.Fatalf("migrate printed %q", out)
	}
}

// The dry run's warnings are printed: a LATE message is older than what was
// applied after it.
func TestPrintReplayShowsWarnings(t *testing.T) {
	var b strings.Builder
	printReplay(&b, admin.ReplayRequest{IDs: []string{"7"}}, admin.ReplayResult{Replayed: []string{"7"}, Refused: map[string]string{},
		Warnings: map[string]string{"7": "older than what was applied: replaying it applies it after the newer messages"}}, "would be replayed")
	if !strings.Contains(b.String(), "warning 7: older than what was applied") {
		t.Fatalf("printed:\n%s", b.String())
	}
}
