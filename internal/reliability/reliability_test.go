package reliability

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/store/storetest"
)

// TestShortCampaign is the CI version of the campaign: the real binary in
// the production profile, mailbox writers that insert twice now and then,
// ingress clients, hostile bodies, three kill -9s and one cut of every
// database connection; then the whole history is checked against the oracle.
// The route-passport traffic is left to the full campaign: after a kill -9
// its records wait out the Kafka consumer session (45 s) before another
// member gets them, which alone would double this test's time.
func TestShortCampaign(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	t.Cleanup(func() {
		if t.Failed() {
			logTail(t, filepath.Join(dir, "msgx.log"), 80)
		}
	})
	f, err := Run(ctx, Config{
		Root:        "../..",
		Workdir:     dir,
		PostgresURL: storetest.PostgresURL(),
		MariaDSN:    storetest.MySQLDSN(),
		Duration:    30 * time.Second,
		Kills:       3,
		Cuts:        1,
		Second:      true,
		Skew:        40 * time.Second,
		PrivateDB:   true,
		Restarts:    1,
		BadInput:    true,
		Writers:     3,
		Clients:     2,
		Flights:     5,
		Pace:        100 * time.Millisecond,
		DupRate:     0.05,
		Progress:    testWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("figures:\n%s", f)
	if f.Kills != 3 || f.Cuts != 1 || f.Restarts != 1 || f.Instances != 2 || f.MailboxDuplicates == 0 || f.EventsExpected == 0 || f.BadInputTried < 9 {
		t.Errorf("the campaign did not do what it should: %+v", f)
	}
	if n := f.Violations.Count(); n > 0 {
		t.Errorf("%d violations:\n%s", n, f.Violations)
	}
}

// logTail logs the last n lines of the service log.
func logTail(t *testing.T, path string, n int) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Log(err)
		return
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	t.Logf("the last lines of %s:\n%s", filepath.Base(path), strings.Join(lines[max(0, len(lines)-n):], "\n"))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
