package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/msgx/msgx/admin"
	"github.com/msgx/msgx/buildinfo"
	"github.com/spf13/cobra"
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

// TestVersion: `msgx version`, `msgx --version` and `msgx version --json`
// say the same build: version, Go version, the adapters compiled in.
func TestVersion(t *testing.T) {
	out := run(t, "version")
	if !strings.HasPrefix(out, "msgx ") || !strings.Contains(out, "go        "+runtime.Version()+"\n") ||
		!strings.Contains(out, "adapters  "+strings.Join(compiledAdapters(), ", ")+"\n") {
		t.Fatalf("version printed %q", out)
	}
	if flag := run(t, "--version"); flag != out {
		t.Fatalf("--version printed %q, version %q", flag, out)
	}
	var in buildinfo.Info
	if err := json.Unmarshal([]byte(run(t, "version", "--json")), &in); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "msgx "+in.Version+"\n") || in.GoVersion != runtime.Version() || len(in.Adapters) == 0 {
		t.Fatalf("version --json: %+v", in)
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

// TestManAndCompletion: `msgx man DIR` writes a page for msgx and for every
// command, their help text intact; `msgx completion` writes the scripts of
// the usual shells.
func TestManAndCompletion(t *testing.T) {
	dir := t.TempDir()
	run(t, "man", dir)
	var want int
	var count func(c *cobra.Command)
	count = func(c *cobra.Command) {
		if c.IsAvailableCommand() || c == c.Root() {
			want++
		}
		for _, sub := range c.Commands() {
			count(sub)
		}
	}
	root := newRoot()
	root.InitDefaultCompletionCmd() // what Execute adds before it runs a command
	count(root)
	pages, err := filepath.Glob(filepath.Join(dir, "*.1"))
	if err != nil || len(pages) != want {
		t.Fatalf("%d manual pages, want %d (one per command): %v", len(pages), want, err)
	}
	serve, err := os.ReadFile(filepath.Join(dir, "msgx-serve.1"))
	if err != nil || !strings.Contains(string(serve), "MSGX_CONFIG") || !strings.Contains(string(serve), `.TH "MSGX" "1"`) {
		t.Fatalf("msgx-serve.1: %v\n%s", err, serve)
	}
	for _, sh := range []string{"bash", "zsh", "fish"} {
		if out := run(t, "completion", sh); !strings.Contains(out, "msgx") || len(out) < 500 {
			t.Errorf("completion %s: %q", sh, out[:min(len(out), 200)])
		}
	}
}
