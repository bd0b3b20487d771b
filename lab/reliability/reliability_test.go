package reliability

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/broker/rabbitmq"
	"github.com/msgx/msgx/failpoint"
	"github.com/msgx/msgx/store/storetest"
)

// TestShortCampaign is the CI version of the campaign: the real binary in
// the production profile, two instances whose clocks are 80 s apart,
// mailbox writers that insert twice now and then, ingress clients,
// route-passport records on Kafka, hostile bodies and records, three
// kill -9s, one cut of every database connection, one real restart of the
// private database servers, a Kafka outage and a RabbitMQ outage of a few
// seconds while a RabbitMQ sender publishes to the sis stream's broker
// source with publisher confirms (re-sending what is not confirmed), and one
// aimed kill per failpoint (an instance restarted with the point armed kills
// itself inside the window it names), and a mailbox row committed after
// its gap was declared permanent (refused as LATE, as the default policy
// says, and not a violation); then the
// whole history is checked against the oracle. Each restart takes the
// route-passport partitions back under its instance id at once: a kill that
// left them to the Kafka session (45 s) would show in the route-passport
// ingestion wait, which is bounded here.
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
		Root:         "../..",
		Workdir:      dir,
		PostgresURL:  storetest.PostgresURL(),
		MariaDSN:     storetest.MySQLDSN(),
		Duration:     30 * time.Second,
		Kills:        3,
		Cuts:         1,
		KafkaOutage:  4 * time.Second,
		RabbitURL:    rabbitmq.DefaultURL,
		RabbitOutage: 4 * time.Second,
		Second:       true,
		Skew:         40 * time.Second,
		PrivateDB:    true,
		Restarts:     1,
		Aimed:        len(failpoint.Points),
		StreamLease:  10 * time.Second,
		BadInput:     true,
		LateRow:      true,
		Writers:      3,
		Clients:      2,
		Flights:      5,
		Routes:       3,
		Pace:         100 * time.Millisecond,
		DupRate:      0.05,
		Progress:     testWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("figures:\n%s", f)
	if f.Kills != 3 || f.Cuts != 1 || f.Restarts != 1 || f.Instances != 2 || f.KafkaOutages != 1 || f.KafkaRefused == 0 ||
		f.MailboxDuplicates == 0 || f.EventsExpected == 0 || f.RouteRecords == 0 || f.BadInputTried < 9+13 ||
		f.LateRows != 1 || f.LateRefused < 1 ||
		f.RabbitOutages != 1 || f.RabbitConfirmed == 0 || f.RabbitRows < f.RabbitConfirmed || f.RabbitDuplicates == 0 {
		t.Errorf("the campaign did not do what it should: %+v", f)
	}
	// Every armed point must have been reached: a point the traffic never
	// reaches (moved, or its window gone) fails here.
	for _, p := range failpoint.Points {
		if a := f.Aimed[p]; a == nil || a.Died < 1 {
			t.Errorf("failpoint %s: the instance armed with it never died there: %+v", p, a)
		}
	}
	// The wait includes the outage and a restart; a kill whose partitions
	// waited for the dead member's session would add the 45 s session.
	if f.RouteIngestMax > 30*time.Second {
		t.Errorf("a route-passport record waited %s to be ingested: the group did not take the restarted instance back at once", f.RouteIngestMax)
	}
	if n := f.Violations.Count(); n > 0 {
		t.Errorf("%d violations:\n%s", n, f.Violations)
	}
}

// TestBrokerOutageLongerThanTheRetryBudget: Kafka, where the relay sends
// every event, is away for 60 s while the traffic runs, longer than the
// relay's retry budget (5 attempts: with the campaign's 5 s publish timeout
// and the production backoff of 1 s doubling, about 40 s). The relay of each
// of the two instances pauses the targets and charges no attempt: no event
// may go DEAD for it. As Kafka comes back it refuses one msg event for
// itself (RejectOne): that event alone goes DEAD, its flight's later events
// wait behind it while the other flights' flow, and after the operator's
// replay the oracle's checks (every event on the wire, each flight's events
// in order) must hold.
func TestBrokerOutageLongerThanTheRetryBudget(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dir := t.TempDir()
	t.Cleanup(func() {
		if t.Failed() {
			logTail(t, filepath.Join(dir, "msgx.log"), 80)
		}
	})
	const outage = time.Minute
	f, err := Run(ctx, Config{
		Root:        "../..",
		Workdir:     dir,
		PostgresURL: storetest.PostgresURL(),
		MariaDSN:    storetest.MySQLDSN(),
		Duration:    100 * time.Second,
		KafkaOutage: outage,
		RejectOne:   true,
		Second:      true,
		StreamLease: 10 * time.Second,
		Writers:     2,
		Clients:     1,
		Flights:     5,
		Routes:      2,
		Pace:        100 * time.Millisecond,
		Progress:    testWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("figures:\n%s", f)
	if f.KafkaOutages != 1 || f.KafkaOutageLength != outage || f.KafkaRefused == 0 || f.EventsExpected == 0 ||
		f.Rejected == "" || f.RejectedRefusals == 0 || f.RejectedWaiting == 0 {
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
