package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/msgx/msgx/admin"
	"github.com/msgx/msgx/app/config"
	"github.com/msgx/msgx/broker/brokertest"
	"github.com/msgx/msgx/store/storetest"
)

// readyz answers /readyz: its status and the failed checks with their
// errors (shown to a caller with a token, here the read token).
func readyz(t *testing.T, addr string) (int, map[string]string) {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+addr+"/readyz", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+readTok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Checks []admin.CheckResult `json:"checks"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	failed := map[string]string{}
	for _, c := range body.Checks {
		if !c.OK {
			failed[c.Name] = c.Error
		}
	}
	return resp.StatusCode, failed
}

// /readyz pings each broker: a Kafka that goes away makes it 503 naming the
// broker, within the check's bound; the Kafka back on its port makes it 200
// again.
func TestReadyzPingsTheBrokers(t *testing.T) {
	_, dsn := storetest.NewSchema(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { kf.Close() }()
	cfg := loadConfig(t, fmt.Sprintf(`
store: {dsn: %q}
admin: {listen: "127.0.0.1:0"}
ingress: {listen: ""}
brokers: {k: {kind: kafka, seeds: ["127.0.0.1:%d"]}}
`, dsn, port))
	a := runApp(t, cfg)

	wait := func(what string, cond func(int, map[string]string) bool) {
		t.Helper()
		waitReadyz(t, a.AdminAddr(), 30*time.Second, what, cond)
	}
	wait("ready with the broker up", func(code int, _ map[string]string) bool { return code == 200 })

	kf.Close()
	start := time.Now()
	wait("not ready with the broker gone", func(code int, failed map[string]string) bool {
		return code == 503 && failed["broker k"] != "" && len(failed) == 1
	})
	// One check is bounded (2 s), and so is the whole answer (5 s).
	began := time.Now()
	if code, _ := readyz(t, a.AdminAddr()); code != 503 || time.Since(began) > 5500*time.Millisecond {
		t.Errorf("/readyz with the broker gone: %d after %s", code, time.Since(began))
	}
	t.Logf("503 %s after the broker went away", time.Since(start).Round(time.Millisecond))

	if kf, err = kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port)); err != nil {
		t.Fatal(err)
	}
	wait("ready with the broker back", func(code int, failed map[string]string) bool { return code == 200 && len(failed) == 0 })
	if _, failed := readyz(t, a.AdminAddr()); strings.Contains(fmt.Sprint(failed), "broker") {
		t.Errorf("broker still failing: %v", failed)
	}
}

// The same for RabbitMQ, MQTT and NATS, each behind a TCP proxy that cuts
// every connection and refuses new ones: 503 naming each, then 200 once the
// clients have reconnected.
func TestReadyzPingsEveryLocalBrokerKind(t *testing.T) {
	_, dsn := storetest.NewSchema(t)
	proxies := map[string]*brokertest.Proxy{}
	for name, target := range map[string]string{"rmq": "127.0.0.1:5672", "mq": "127.0.0.1:1883", "nt": "127.0.0.1:4222"} {
		p, err := brokertest.NewProxy(target)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		proxies[name] = p
	}
	cfg := loadConfig(t, fmt.Sprintf(`
store: {dsn: %q}
admin: {listen: "127.0.0.1:0"}
ingress: {listen: ""}
brokers:
  rmq: {kind: rabbitmq, url: "amqp://guest:guest@%s/"}
  mq: {kind: mqtt, url: "tcp://%s"}
  nt: {kind: nats, url: "nats://%s"}
`, dsn, proxies["rmq"].Addr(), proxies["mq"].Addr(), proxies["nt"].Addr()))
	a := runApp(t, cfg)
	wait := func(what string, cond func(int, map[string]string) bool) {
		t.Helper()
		waitReadyz(t, a.AdminAddr(), 60*time.Second, what, cond)
	}
	wait("ready", func(code int, _ map[string]string) bool { return code == 200 })
	for _, p := range proxies {
		p.Cut()
	}
	wait("every broker failing", func(code int, failed map[string]string) bool {
		return code == 503 && failed["broker rmq"] != "" && failed["broker mq"] != "" && failed["broker nt"] != ""
	})
	for _, p := range proxies {
		p.Restore()
	}
	wait("ready again", func(code int, failed map[string]string) bool { return code == 200 && len(failed) == 0 })
}

// runApp runs an App of cfg until the test ends.
func runApp(t *testing.T, cfg *config.Config) *App {
	t.Helper()
	return runAppWith(t, cfg, registry())
}

// runAppWith runs an App of cfg and reg until the test ends.
func runAppWith(t *testing.T, cfg *config.Config, reg *Registry) *App {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a, err := New(ctx, cfg, reg, WithLogOutput(io.Discard))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return a
}

// waitReadyz polls /readyz until cond holds, for at most bound.
func waitReadyz(t *testing.T, addr string, bound time.Duration, what string, cond func(int, map[string]string) bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		code, failed := readyz(t, addr)
		if cond(code, failed) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: /readyz %d %v", what, code, failed)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A mailbox whose table goes missing still answers a ping: /readyz turns
// 503 with check "mailbox shared" naming the failure once the poller has
// failed to read it for unreadable-after, /v1/status and the gauge show it,
// and the table back makes /readyz 200 again.
func TestReadyzFailsOnAnUnreadableMailbox(t *testing.T) {
	_, dsn := storetest.NewSchema(t)
	table, mdb := newMailbox(t, 1)
	cfg := loadConfig(t, fmt.Sprintf(`
store: {dsn: %q}
admin: {listen: "127.0.0.1:0", read-token: "`+readTok+`", operator-token: "`+opTok+`"}
ingress: {listen: ""}
mailboxes: {shared: {kind: mysql, dsn: "`+mariaDSN+`", table: %s, start: from-beginning, poll-interval: 20ms, unreadable-after: 1s}}
streams: {s: {processor: flop, mailbox: shared, poll-interval: 20ms}}
`, dsn, table))
	a := runApp(t, cfg)
	waitReadyz(t, a.AdminAddr(), 30*time.Second, "ready", func(code int, _ map[string]string) bool { return code == 200 })

	if _, err := mdb.Exec("RENAME TABLE " + table + " TO " + table + "_away"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = mdb.Exec("DROP TABLE IF EXISTS " + table + "_away") })
	waitReadyz(t, a.AdminAddr(), 30*time.Second, "not ready with the mailbox table missing", func(code int, failed map[string]string) bool {
		reason := failed["mailbox shared"]
		return code == 503 && strings.Contains(reason, "unreadable for") && strings.Contains(reason, "doesn't exist")
	})
	var st admin.Status
	if code := get(t, a.AdminAddr(), "/v1/status", readTok, &st); code != 200 || len(st.Streams) != 1 ||
		st.Streams[0].MailboxUnreadable < 1 || !strings.Contains(st.Streams[0].MailboxError, "doesn't exist") {
		t.Errorf("status with the mailbox unreadable: %d %+v", code, st.Streams)
	}
	resp, err := http.Get("http://" + a.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !regexp.MustCompile(`(?m)^msgx_mailbox_unreadable_seconds\{stream="s"\} [1-9]`).Match(metrics) {
		t.Errorf("msgx_mailbox_unreadable_seconds not above 1 s:\n%s", grepLines(string(metrics), "msgx_mailbox_unreadable"))
	}

	if _, err := mdb.Exec("RENAME TABLE " + table + "_away TO " + table); err != nil {
		t.Fatal(err)
	}
	waitReadyz(t, a.AdminAddr(), 30*time.Second, "ready with the table back", func(code int, failed map[string]string) bool {
		return code == 200 && len(failed) == 0
	})
}

// grepLines returns the lines of s containing sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// A pipeline's own check is part of /readyz, named "pipeline NAME", with
// its error: 503 while it fails, 200 once it passes.
func TestReadyzAsksThePipelines(t *testing.T) {
	var stuck atomic.Bool
	stuck.Store(true)
	reg := registry()
	reg.Pipeline("demo", func(_ context.Context, _ Deps, _ PipelineSpec) (*Pipeline, error) {
		return &Pipeline{
			Run: func(ctx context.Context) error { <-ctx.Done(); return nil },
			Check: func(context.Context) error {
				if stuck.Load() {
					return errors.New("ingest of record in/0/7: 12 transient failures in a row")
				}
				return nil
			},
		}, nil
	})
	cfg := loadConfig(t, fmt.Sprintf(embedded, filepath.Join(t.TempDir(), "msgx.db"))+"pipelines: {demo: {broker: local}}\n")
	a := runAppWith(t, cfg, reg)
	waitReadyz(t, a.AdminAddr(), 30*time.Second, "not ready while the pipeline is stuck", func(code int, failed map[string]string) bool {
		return code == 503 && strings.Contains(failed["pipeline demo"], "in/0/7: 12 transient failures") && len(failed) == 1
	})
	stuck.Store(false)
	waitReadyz(t, a.AdminAddr(), 30*time.Second, "ready", func(code int, failed map[string]string) bool { return code == 200 && len(failed) == 0 })
}
