package failpoint

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
)

func TestParse(t *testing.T) {
	for _, spec := range []string{"", "  "} {
		if s, err := Parse(spec); s != nil || err != nil {
			t.Fatalf("%q: %v %v, want nil, nil", spec, s, err)
		}
	}
	s, err := Parse(" outbox-after-confirm=3, inbox-after-commit = 10 ")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.String(), "inbox-after-commit=10,outbox-after-confirm=3"; got != want {
		t.Fatalf("String %q, want %q", got, want)
	}
	for spec, msg := range map[string]string{
		"inbox-after-commit":                        "want POINT=N",
		"nowhere=1":                                 "unknown point",
		"inbox-after-commit=0":                      "from 1 to",
		"inbox-after-commit=-2":                     "from 1 to",
		"inbox-after-commit=two":                    "from 1 to",
		"inbox-after-commit=1e9":                    "from 1 to",
		"inbox-after-commit=1,inbox-after-commit=2": "named twice",
		"inbox-after-commit=1,":                     "want POINT=N",
	} {
		if _, err := Parse(spec); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: %v, want an error saying %q", spec, err, msg)
		}
	}
}

func TestHitKillsAtTheNthTime(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	kills := 0
	s, err := Parse("inbox-mid-batch=3", WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))),
		WithKill(func() { mu.Lock(); kills++; mu.Unlock() }))
	if err != nil {
		t.Fatal(err)
	}
	s.Hit(InboxAfterCommit) // not armed
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); s.Hit(InboxMidBatch) }()
	}
	wg.Wait()
	if kills != 0 || s.Hits(InboxMidBatch) != 2 || s.Hits(InboxAfterCommit) != 0 {
		t.Fatalf("after two hits: %d kills, %d hits", kills, s.Hits(InboxMidBatch))
	}
	s.Hit(InboxMidBatch)
	if kills != 1 {
		t.Fatalf("third hit: %d kills, want 1", kills)
	}
	if !strings.Contains(logs.String(), `"msg":"`+LogMessage+`","failpoint":"inbox-mid-batch","hit":3`) {
		t.Fatalf("log %q lacks the line before the kill", logs.String())
	}
	s.Hit(InboxMidBatch)
	if kills != 1 {
		t.Fatalf("fourth hit: %d kills, want still 1", kills)
	}
}

func TestNilSetAndWith(t *testing.T) {
	var s *Set
	s.Hit(InboxAfterCommit) // must not panic
	if s.Hits(InboxAfterCommit) != 0 || s.String() != "" || s.With(WithKill(nil)) != nil {
		t.Fatal("a nil Set must arm nothing")
	}
	kills := 0
	a, err := Parse("sis-mid-snapshot=2", WithKill(func() { kills += 10 }))
	if err != nil {
		t.Fatal(err)
	}
	b := a.With(WithKill(func() { kills++ }))
	a.Hit(SISMidSnapshot)
	b.Hit(SISMidSnapshot) // the count is shared: the second hit, through b
	if kills != 1 || a.Hits(SISMidSnapshot) != 2 {
		t.Fatalf("kills %d hits %d: With must share the counts and apply its options", kills, a.Hits(SISMidSnapshot))
	}
}

// TestDefaultKill runs this test binary again with a point armed at its
// first hit and no kill replaced: the child must die by SIGKILL right after
// the point's line.
func TestDefaultKill(t *testing.T) {
	if os.Getenv("FAILPOINT_CHILD") == "1" {
		s, err := Parse("outbox-after-confirm=1", WithLogger(slog.New(slog.NewJSONHandler(os.Stderr, nil))))
		if err != nil {
			t.Fatal(err)
		}
		s.Hit(OutboxAfterConfirm)
		t.Fatal("still alive after the point")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestDefaultKill$")
	cmd.Env = append(os.Environ(), "FAILPOINT_CHILD=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("child: %v, want an exit by SIGKILL", err)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want SIGKILL", err)
	}
	if !strings.Contains(stderr.String(), `"msg":"`+LogMessage+`","failpoint":"outbox-after-confirm","hit":1`) {
		t.Fatalf("child's stderr lacks the point's line: %q", stderr.String())
	}
}
