package routepassport

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// TestMain runs the pipeline as a child process when the kill test starts
// this test binary with ROUTEPASSPORT_CHILD set.
func TestMain(m *testing.M) {
	if os.Getenv("ROUTEPASSPORT_CHILD") != "" {
		if err := runChild(); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func runChild() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	db, err := store.Open(ctx, os.Getenv("ROUTEPASSPORT_DSN"), store.WithLogger(log))
	if err != nil {
		return err
	}
	defer db.Close()
	b := newKafkaBroker(strings.Split(os.Getenv("ROUTEPASSPORT_SEEDS"), ","), log)
	if err := b.Start(ctx); err != nil {
		return err
	}
	defer func() { _ = b.Stop(context.Background()) }()
	topics := strings.Split(os.Getenv("ROUTEPASSPORT_TOPICS"), ",")
	p, err := New(db, b, WithTopics(topics[0], topics[1], topics[2], topics[3]), WithGroup(os.Getenv("ROUTEPASSPORT_GROUP")),
		WithLogger(log), WithRetry(fastRetry), WithBatchSize(20),
		// A killed relay's claims come back after the lease.
		WithRelayOptions(outbox.WithPollInterval(10*time.Millisecond), outbox.WithLease(4*time.Second),
			outbox.WithPublishTimeout(time.Second), outbox.WithDBTimeout(time.Second)))
	if err != nil {
		return err
	}
	defer p.Close()
	return p.Run(ctx)
}

// The pipeline as a real process, killed with SIGKILL twice while records
// flow and restarted: no record is lost and none gets a second pair of
// events (an event may be re-sent with its own id: at-least-once).
func TestKilledMidStreamLosesNothing(t *testing.T) {
	e := newEnv(t, 3)
	_, dsn := storetest.NewSchema(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	db, err := store.Open(ctx, dsn, store.WithMigrate(Schema()), store.WithLogger(testkit.Quiet()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	in, geo := e.reader(e.routeIn), e.reader(e.georef)
	const n = 3000
	e.produce(records("K", 0, n)...)

	start := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "ROUTEPASSPORT_CHILD=1", "ROUTEPASSPORT_DSN="+dsn,
			"ROUTEPASSPORT_SEEDS="+strings.Join(e.seeds(), ","), "ROUTEPASSPORT_GROUP="+e.group,
			"ROUTEPASSPORT_TOPICS="+strings.Join([]string{e.input, e.dlq, e.routeIn, e.georef}, ","))
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	ingested := func() int { return countRows(t, db, `SELECT count(*) FROM route_passport_sources`) }
	for _, at := range []int{600, 1800} {
		cmd := start()
		deadline := time.Now().Add(60 * time.Second)
		for ingested() < at {
			if time.Now().After(deadline) {
				t.Fatalf("child ingested %d of %d records in 60 s", ingested(), at)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		got := ingested()
		if got >= n {
			t.Fatalf("the child finished all %d records before it was killed", n)
		}
		// Offsets are committed every 200 ms: what was ingested after the
		// last commit is delivered again to the next process.
		offs, err := kadm.NewClient(e.cl).FetchOffsets(ctx, e.group)
		if err != nil {
			t.Fatal(err)
		}
		var committed int64
		offs.Each(func(o kadm.OffsetResponse) { committed += o.At })
		t.Logf("killed after %d records ingested, %d offsets committed", got, committed)
	}
	cmd := start()
	in.waitFor(t, n, 120*time.Second)
	geo.waitFor(t, n, 120*time.Second)
	checkOnePairEach(t, n, map[string][]*kgo.Record{e.routeIn: in.drain(500 * time.Millisecond), e.georef: geo.drain(100 * time.Millisecond)})
	if got := ingested(); got != n {
		t.Fatalf("%d records ingested, want %d", got, n)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
}
