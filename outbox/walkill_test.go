package outbox_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
)

const walChildEnv = "MSGX_OUTBOX_WAL_CHILD"

// fileSink is a publisher that confirms a send once it has written its
// event ids, a line each, to a file: what the broker holds survives the
// kill of the process.
type fileSink struct {
	mu sync.Mutex
	f  *os.File
}

func (s *fileSink) SendConfirmed(_ context.Context, _ string, msgs ...*broker.Message) error {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString(m.Key + " " + m.Header(broker.HeaderEventID) + "\n")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := s.f.WriteString(b.String())
	// Slow enough that the parent's kill lands mid-stream.
	time.Sleep(2 * time.Millisecond)
	return err
}

// walChild runs a WAL relay (per-key lane "o") into the file named by the
// environment until it is killed or stopped.
func walChild() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	env := strings.Split(os.Getenv(walChildEnv), "|") // dsn|slot|publication|file
	db, err := store.Open(ctx, env[0], store.WithLogger(log))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	defer db.Close()
	f, err := os.OpenFile(env[3], os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	r, err := outbox.NewWALRelay(db, env[0], outbox.WithLogger(log), outbox.WALSlot(env[1]), outbox.WALPublication(env[2]),
		outbox.WALBatch(25), outbox.WALStandbyPoll(20*time.Millisecond), outbox.Target("o", &fileSink{f: f}, outbox.PerKey))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	defer r.Close()
	if err := r.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

// TestWALRelayKilledMidStream: the relay as a real process, killed with
// SIGKILL twice while it streams a backlog, and restarted: every event
// reaches the broker, the ones sent again carry their own id, and each key's
// events first arrive in commit order.
func TestWALRelayKilledMidStream(t *testing.T) {
	e := newWALEnv(t)
	e.relay(t, outbox.Target("o", &sink{}, outbox.PerKey)) // prepares the slot; never run
	const txs, keys = 200, 8
	var all []string
	for i := 1; i <= txs; i++ {
		var evs []outbox.Event
		for k := range keys {
			evs = append(evs, ev("o", fmt.Sprintf("K%d", k), i))
			all = append(all, evs[len(evs)-1].ID)
		}
		enqueue(t, e.db, t0, evs...)
	}
	out := filepath.Join(t.TempDir(), "broker.log")
	start := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), walChildEnv+"="+strings.Join([]string{e.dsn, e.slot, e.pub, out}, "|"))
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	for _, at := range []int{300, 900} {
		cmd := start()
		testkit.Eventually(t, fmt.Sprintf("%d events at the broker", at), 60*time.Second, func() bool { return len(readLog(t, out)) >= at })
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		got := len(readLog(t, out))
		if distinct(readLog(t, out)) >= len(all) {
			t.Fatalf("the child sent every event before it was killed")
		}
		t.Logf("killed with %d events at the broker", got)
	}
	cmd := start()
	testkit.Eventually(t, "every event", 120*time.Second, func() bool { return distinct(readLog(t, out)) == len(all) })
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	// A kill is no event's failure: nothing was charged or handed to the
	// table.
	var rows int
	if err := e.db.QueryRow(context.Background(), "SELECT count(*) FROM msgx_outbox").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Errorf("%d events went to the outbox table across the kills", rows)
	}
	lines := readLog(t, out)
	t.Logf("%d sends for %d events (%d sent again after a kill)", len(lines), len(all), len(lines)-len(all))
	firsts := map[string][]string{}
	seen := map[string]bool{}
	for _, l := range lines {
		key, id, _ := strings.Cut(l, " ")
		if !seen[id] {
			seen[id] = true
			firsts[key] = append(firsts[key], id)
		}
	}
	for k := range keys {
		key := fmt.Sprintf("K%d", k)
		want := make([]string, txs)
		for i := range txs {
			want[i] = fmt.Sprintf("o-%s-%d", key, i+1)
		}
		if !slices.Equal(firsts[key], want) {
			t.Errorf("key %s first arrived as %v", key, firsts[key])
		}
	}
}

func readLog(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := sc.Text(); l != "" {
			out = append(out, l)
		}
	}
	return out
}

func distinct(lines []string) int {
	seen := map[string]bool{}
	for _, l := range lines {
		seen[l] = true
	}
	return len(seen)
}
