package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/msgx/msgx/internal/tcpproxy"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/store/storetest"
)

// A SIGTERM while the route pipeline retries a record against a database
// that is down: the real process exits at once and cleanly, without waiting
// out the shutdown-timeout and without a line about abandoned work or a
// retry after "stopped"; the record's offset stays uncommitted, so the next
// start, with the database back, stores it.
func TestSIGTERMDuringDatabaseOutageStopsPromptly(t *testing.T) {
	bin := buildMsgx(t)
	schema, direct := storetest.NewSchema(t)
	proxy, err := tcpproxy.New("127.0.0.1:5432")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = proxy.Addr()
	viaProxy := u.String()

	kf, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kf.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cl := mustClient(t, kf.ListenAddrs())
	sfx := strings.ToLower(schema[len(schema)-12:])
	topics := []string{"rp-in-" + sfx, "rp-dlq-" + sfx, "rp-route-in-" + sfx, "rp-georef-" + sfx}
	if _, err := kadm.NewClient(cl).CreateTopics(ctx, 1, 1, nil, topics...); err != nil {
		t.Fatal(err)
	}

	// A shutdown-timeout far above the bound the stop is held to: a stop
	// that waits for the retry, or for the deadline, shows.
	const shutdownTimeout = 30 * time.Second
	cfgPath := filepath.Join(t.TempDir(), "msgx.yaml")
	cfg := fmt.Sprintf(`
profile: production
shutdown-timeout: %s
instance-id: stop-retry-%s
log: {level: info, format: json}
store: {dsn: %q}
admin: {listen: "127.0.0.1:0"}
ingress: {listen: ""}
brokers: {k: {kind: kafka, seeds: [%q]}}
pipelines:
  routepassport:
    broker: k
    options: {group: g-%s, input-topic: %s, dead-letter-topic: %s, route-in-topic: %s, georeference-topic: %s}
`, shutdownTimeout, sfx, viaProxy, kf.ListenAddrs()[0], sfx, topics[0], topics[1], topics[2], topics[3])
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"MSGX_ADMIN_READ_TOKEN=" + readTok, "MSGX_ADMIN_OPERATOR_TOKEN=" + opTok}

	s := startServiceWith(t, bin, cfgPath, false, env)
	testkit.Eventually(t, "the route pipeline to start", 60*time.Second, func() bool {
		return strings.Contains(s.logText(), "route-passport pipeline started")
	})

	// The database goes away: open connections closed, new ones refused.
	proxy.Refuse(true)
	proxy.Cut()
	rec := []byte(`{"routeId":"R-STOP","routeNameFull":"during the outage","geometry":{"type":"Point","coordinates":[1,2]}}`)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topics[0], Key: []byte("R-STOP"), Value: rec}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// Several failed attempts: the record is in a retry wait of seconds.
	attemptRE := regexp.MustCompile(`"msg":"transient failure, retrying; offsets stay uncommitted".*?"attempt":(\d+)`)
	testkit.Eventually(t, "the ingest to retry against the dead database", 60*time.Second, func() bool {
		for _, m := range attemptRE.FindAllStringSubmatch(s.logText(), -1) {
			if n, _ := strconv.Atoi(m[1]); n >= 6 {
				return true
			}
		}
		return false
	})

	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	select {
	case err := <-s.exited:
		took := time.Since(began)
		t.Logf("exited %s after SIGTERM (%v)", took.Round(time.Millisecond), err)
		if err != nil {
			t.Errorf("exit after SIGTERM: %v", err)
		}
		if took > 3*time.Second {
			t.Errorf("the stop took %s: it waited for the retry (shutdown-timeout %s)", took, shutdownTimeout)
		}
	case <-time.After(2 * shutdownTimeout):
		t.Fatalf("no exit within %s of SIGTERM", 2*shutdownTimeout)
	}
	logs := s.logText()
	for _, bad := range []string{"abandoned", "stop deadline passed"} {
		if strings.Contains(logs, bad) {
			t.Errorf("the stop logged %q", bad)
		}
	}
	if i := strings.LastIndex(logs, `"msg":"stopped"`); i < 0 {
		t.Error(`no "stopped" line`)
	} else if after := logs[i:]; strings.Contains(after, "retrying") {
		t.Errorf("a retry logged after \"stopped\":\n%s", after)
	}

	// The database back, the next start stores the record: nothing lost.
	proxy.Refuse(false)
	s2 := startServiceWith(t, bin, cfgPath, false, env)
	conn, err := pgx.Connect(ctx, direct)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	testkit.Eventually(t, "the record to be stored after the restart", 90*time.Second, func() bool {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM route_passports WHERE route_id = 'R-STOP'`).Scan(&n)
		return err == nil && n == 1
	})
	s2.stop(t)
}

// logText is what the service logged so far.
func (s *service) logText() string {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	return s.logs.String()
}
