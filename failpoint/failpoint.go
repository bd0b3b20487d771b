// Package failpoint holds the points where a test build of msgx can be made
// to kill itself with SIGKILL, so that the reliability campaign crashes it
// inside the windows that matter (between a commit and the backfill, between
// the broker's confirmation and marking sent, mid-batch, mid-snapshot)
// instead of only at random moments.
//
// A Set is parsed once from the service's environment (msgx serve reads
// MSGX_FAILPOINTS) and handed down to the components as an option; a nil Set
// arms nothing and costs one nil check per point.
package failpoint

import (
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
)

// The points msgx has.
const (
	// InboxAfterCommit: an inbox group transaction with terminal messages
	// committed, before their processed marks are backfilled to a MySQL
	// mailbox (a mailbox in the store has them already).
	InboxAfterCommit = "inbox-after-commit"
	// InboxMidBatch: inside an inbox group transaction of two messages or
	// more, after the first half of them was processed, before the commit.
	InboxMidBatch = "inbox-mid-batch"
	// OutboxAfterConfirm: the broker confirmed a send of the relay, before
	// the relay marks its events sent.
	OutboxAfterConfirm = "outbox-after-confirm"
	// SISMidSnapshot: the SIS processor wrote the changed flights of a SCHD
	// DNLD/RESP/ADFT into the message's transaction, before the message's
	// savepoint is released and the transaction commits.
	SISMidSnapshot = "sis-mid-snapshot"
)

// Points lists every point, in the order the campaign cycles through them.
var Points = []string{InboxAfterCommit, OutboxAfterConfirm, InboxMidBatch, SISMidSnapshot}

// maxHit bounds the hit count of one point (a typo such as 1e9 is an error,
// not a point that never fires).
const maxHit = 1_000_000

// LogMessage is the message of the line logged just before the kill; the
// campaign matches it.
const LogMessage = "failpoint reached: killing this process with SIGKILL"

// Set is the armed points and how often each was reached. Its methods are
// safe for concurrent use; a nil *Set arms nothing.
type Set struct {
	points map[string]*point
	log    *slog.Logger
	kill   func()
}

type point struct {
	at   int64 // the hit that kills
	hits atomic.Int64
}

// Option configures Parse.
type Option func(*Set)

// WithLogger sets the logger of the line written before the kill (default
// slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(s *Set) { s.log = l } }

// WithKill replaces what a reached point does (default: SIGKILL to this
// process). Tests use it to stay alive.
func WithKill(f func()) Option { return func(s *Set) { s.kill = f } }

// Parse reads a comma-separated list of POINT=N ("outbox-after-confirm=3,
// inbox-after-commit=10"): at the Nth time POINT is reached, the process
// kills itself. An empty spec returns nil (nothing armed); an unknown point,
// a point named twice or an N below 1 is an error.
func Parse(spec string, opts ...Option) (*Set, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, nil
	}
	s := &Set{points: map[string]*point{}, log: slog.Default(), kill: killSelf}
	for _, item := range strings.Split(spec, ",") {
		name, n, ok := strings.Cut(strings.TrimSpace(item), "=")
		name = strings.TrimSpace(name)
		if !ok {
			return nil, fmt.Errorf("failpoint %q: want POINT=N", item)
		}
		if !slices.Contains(Points, name) {
			return nil, fmt.Errorf("failpoint %q: unknown point (known: %s)", name, strings.Join(Points, ", "))
		}
		if s.points[name] != nil {
			return nil, fmt.Errorf("failpoint %q named twice", name)
		}
		at, err := strconv.ParseInt(strings.TrimSpace(n), 10, 64)
		if err != nil || at < 1 || at > maxHit {
			return nil, fmt.Errorf("failpoint %s=%s: N must be a whole number from 1 to %d", name, n, maxHit)
		}
		s.points[name] = &point{at: at}
	}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// With returns a Set that shares s's points and counts with opts applied
// (the service gives its own logger this way); nil for a nil s.
func (s *Set) With(opts ...Option) *Set {
	if s == nil {
		return nil
	}
	c := *s
	for _, o := range opts {
		o(&c)
	}
	return &c
}

// Hit notes that the point name is reached; at its armed count it logs
// LogMessage at error level and kills the process.
func (s *Set) Hit(name string) {
	if s == nil {
		return
	}
	p := s.points[name]
	if p == nil {
		return
	}
	if n := p.hits.Add(1); n == p.at {
		s.log.Error(LogMessage, "failpoint", name, "hit", n)
		s.kill()
	}
}

// Hits is how often name was reached (0 when it is not armed).
func (s *Set) Hits(name string) int64 {
	if s == nil || s.points[name] == nil {
		return 0
	}
	return s.points[name].hits.Load()
}

// String lists the armed points as Parse reads them.
func (s *Set) String() string {
	if s == nil {
		return ""
	}
	var parts []string
	for _, name := range Points {
		if p := s.points[name]; p != nil {
			parts = append(parts, name+"="+strconv.FormatInt(p.at, 10))
		}
	}
	return strings.Join(parts, ",")
}

// killSelf sends SIGKILL to this process and never returns.
func killSelf() {
	p, err := os.FindProcess(os.Getpid())
	if err == nil {
		err = p.Kill()
	}
	if err != nil {
		// Cannot happen on the platforms msgx runs on; die anyway, visibly
		// not by the signal.
		fmt.Fprintln(os.Stderr, "failpoint: SIGKILL failed:", err)
		os.Exit(3)
	}
	select {} // the signal is on its way: nothing more runs here
}
