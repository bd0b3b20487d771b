package app

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/msgx/msgx/app/apptest"
	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/brokertest"
	"github.com/msgx/msgx/broker/rabbitmq"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/source/mailbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// openStore opens (and migrates) the test's store.
func openStore(t *testing.T, dsn string) *store.DB {
	t.Helper()
	db, err := store.Open(context.Background(), dsn, store.WithMigrate(AllSchema(NewRegistry())...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return db
}

// succeeded counts the stream's inbox rows that reached SUCCEEDED.
func succeeded(t *testing.T, db *store.DB, stream string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), "SELECT COUNT(*) FROM msgx_inbox WHERE stream = $1 AND status = $2",
		stream, string(inbox.Succeeded)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The service starts while its RabbitMQ is down and processes the mailbox:
// rows reach SUCCEEDED with their events held in the outbox, /readyz names
// the broker with the reason, and the stream's broker source waits instead
// of stopping the stream. When RabbitMQ comes back the broker starts in the
// background, the relay sends the held events, and the source consumes.
// RabbitMQ is shared with other tests, so "stopped" is a TCP proxy between
// msgx and it that refuses every connection, then lets them through again.
func TestStartsWithRabbitMQDown(t *testing.T) {
	ctx := context.Background()
	_, dsn := storetest.NewSchema(t)
	db := openStore(t, dsn)
	proxy, err := brokertest.NewProxy("127.0.0.1:5672")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	proxy.Cut()
	suffix := storetest.UniqueName("")
	out, in := "start-out-"+suffix, "start-in-"+suffix
	t.Cleanup(func() { deleteTopology(t, out, "g"+suffix); deleteTopology(t, in, "msgx-"+suffix) })
	reg := registry()
	reg.Processor("writer", func(_ context.Context, _ Deps, _ string, opts map[string]string) (inbox.Processor, error) {
		return inbox.Typed(writer{apptest.New(opts)}), nil
	})
	cfg := loadConfig(t, fmt.Sprintf(`
store: {dsn: %q}
admin: {listen: "127.0.0.1:0"}
ingress: {listen: ""}
brokers: {rmq: {kind: rabbitmq, url: "amqp://guest:guest@%s/"}}
mailboxes: {local: {kind: store, start: from-beginning, poll-interval: 20ms}}
streams:
  s:
    processor: writer
    options: {target: "t:rmq", topic: %q}
    mailbox: local
    poll-interval: 20ms
    sources: {feed: {kind: broker, broker: rmq, topic: %q, group: %q}}
relay: {poll-interval: 20ms, backoff: {initial: 100ms, max: 1s}, targets: {"t:rmq": {broker: rmq}}}
`, dsn, proxy.Addr(), out, in, "msgx-"+suffix))
	msgs, err := apptest.Messages(6, 2, time.Now().UnixNano()%1_000_000_000)
	if err != nil {
		t.Fatal(err)
	}
	mb, err := mailbox.NewStore(db)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs[:5] {
		if _, err := mb.Insert(ctx, m, time.Now(), mailbox.Meta{}); err != nil {
			t.Fatal(err)
		}
	}

	a := runAppWith(t, cfg, reg)
	testkit.Eventually(t, "the mailbox rows processed with RabbitMQ down", 30*time.Second, func() bool { return succeeded(t, db, "s") == 5 })
	var pending int
	if err := db.QueryRow(ctx, "SELECT COUNT(*) FROM msgx_outbox WHERE target = 't:rmq'").Scan(&pending); err != nil || pending != 5 {
		t.Fatalf("events held in the outbox: %d %v", pending, err)
	}
	waitReadyz(t, a.AdminAddr(), 10*time.Second, "the broker not ready", func(code int, failed map[string]string) bool {
		return code == 503 && strings.Contains(failed["broker rmq"], "not started after")
	})

	if m := scrape(t, a.AdminAddr()); !strings.Contains(m, `msgx_broker_connected{broker="rmq"} 0`) ||
		!regexp.MustCompile(`msgx_broker_start_failures_total\{broker="rmq"\} [1-9]`).MatchString(m) {
		t.Errorf("the broker's start metrics while it is down:\n%s", grepLines(m, "msgx_broker_"))
	}

	// A consumer of the events, straight to RabbitMQ.
	direct := broker.New("direct", rabbitmq.New(rabbitmq.WithURL("amqp://guest:guest@127.0.0.1:5672/")), broker.WithLogger(a.Logger()))
	if err := direct.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = direct.Stop(context.Background()) })
	var mu sync.Mutex
	got := map[string]bool{}
	if _, err := direct.Listen(ctx, broker.Subscription{Topic: out, Group: "g" + suffix, Concurrency: 1}, func(_ context.Context, d *broker.Delivery) error {
		mu.Lock()
		got[d.Header(broker.HeaderEventID)] = true
		mu.Unlock()
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	proxy.Restore()
	testkit.Eventually(t, "the held events sent once RabbitMQ is back", 60*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 5
	})
	waitReadyz(t, a.AdminAddr(), 30*time.Second, "ready", func(code int, _ map[string]string) bool { return code == 200 })
	if m := scrape(t, a.AdminAddr()); !strings.Contains(m, `msgx_broker_connected{broker="rmq"} 1`) {
		t.Errorf("the broker's start metrics once it started:\n%s", grepLines(m, "msgx_broker_"))
	}
	// The broker source listens now: a message published to its topic is
	// processed too. Its queue exists once the source has declared it.
	testkit.Eventually(t, "a message through the broker source", 60*time.Second, func() bool {
		if err := direct.SendConfirmed(ctx, in, &broker.Message{Key: "k", Payload: msgs[5]}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			if succeeded(t, db, "s") == 6 {
				return true
			}
			time.Sleep(50 * time.Millisecond)
		}
		return false
	})
}

// scrape reads /metrics.
func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The service starts while the mailbox's MariaDB is down: the stream on the
// store's mailbox runs, /readyz names the unreachable mailbox, and its rows
// are processed to SUCCEEDED once it is back. MariaDB is shared, so "down"
// is a TCP proxy between msgx and it that refuses every connection.
func TestStartsWithTheMailboxDatabaseDown(t *testing.T) {
	ctx := context.Background()
	_, dsn := storetest.NewSchema(t)
	db := openStore(t, dsn)
	table, _ := newMailbox(t, 4)
	proxy, err := brokertest.NewProxy("127.0.0.1:3306")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	proxy.Cut()
	cfg := loadConfig(t, fmt.Sprintf(`
store: {dsn: %q}
admin: {listen: "127.0.0.1:0"}
ingress: {listen: ""}
brokers: {local: {kind: mem}}
mailboxes:
  shared: {kind: mysql, dsn: "root@tcp(%s)/test", table: %s, start: from-beginning, poll-interval: 20ms, unreadable-after: 1s}
  local: {kind: store, start: from-beginning, poll-interval: 20ms}
streams:
  s: {processor: flop, mailbox: shared, poll-interval: 20ms}
  l: {processor: flop, mailbox: local, poll-interval: 20ms}
relay: {poll-interval: 20ms, targets: {"kafka:msg": {broker: local}}}
`, dsn, proxy.Addr(), table))
	msgs, err := apptest.Messages(3, 1, time.Now().UnixNano()%1_000_000_000)
	if err != nil {
		t.Fatal(err)
	}
	mb, err := mailbox.NewStore(db)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if _, err := mb.Insert(ctx, m, time.Now(), mailbox.Meta{}); err != nil {
			t.Fatal(err)
		}
	}
	logs := &testkit.Buffer{}
	rctx, cancel := context.WithCancel(ctx)
	a, err := New(rctx, cfg, registry(), WithLogOutput(logs))
	if err != nil {
		cancel()
		t.Fatalf("start with the mailbox database down: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(rctx) }()
	t.Cleanup(func() { cancel(); <-done })

	testkit.Eventually(t, "the store mailbox's stream processing", 30*time.Second, func() bool { return succeeded(t, db, "l") == 3 })
	waitReadyz(t, a.AdminAddr(), 30*time.Second, "the mailbox not ready", func(code int, failed map[string]string) bool {
		return code == 503 && failed["mailbox shared"] != ""
	})
	if !strings.Contains(logs.String(), "mailbox unreachable") {
		t.Errorf("no line says the mailbox was unreachable at start:\n%s", logs.String())
	}
	// The backlog written before the outage is processed once it is back.
	proxy.Restore()
	testkit.Eventually(t, "the mailbox's rows processed once it is back", 30*time.Second, func() bool { return succeeded(t, db, "s") == 4 })
	waitReadyz(t, a.AdminAddr(), 30*time.Second, "ready", func(code int, _ map[string]string) bool { return code == 200 })
}

// The store is retried at start for store.start-timeout while it cannot be
// reached, each failure logged with the reason; a refusal (an unknown role)
// ends the start at once, and so does the end of the window. PostgreSQL is
// shared, so "down" is a TCP proxy that refuses every connection.
func TestStoreRetriedAtStart(t *testing.T) {
	_, dsn := storetest.NewSchema(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := brokertest.NewProxy(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	proxy.Cut()
	u.Host = proxy.Addr()
	via := u.String()
	yml := func(dsn, timeout string) string {
		return fmt.Sprintf("store: {dsn: %q, start-timeout: %s}\nadmin: {listen: \"127.0.0.1:0\"}\ningress: {listen: \"\"}\n", dsn, timeout)
	}
	ctx := context.Background()

	logs := &testkit.Buffer{}
	type result struct {
		a   *App
		err error
	}
	res := make(chan result, 1)
	go func() {
		a, err := New(ctx, loadConfig(t, yml(via, "1m")), registry(), WithLogOutput(logs))
		res <- result{a, err}
	}()
	testkit.Eventually(t, "a logged retry", 30*time.Second, func() bool { return strings.Contains(logs.String(), "store unreachable at start; retrying") })
	select {
	case r := <-res:
		t.Fatalf("New returned while the store was down: %v", r.err)
	default:
	}
	proxy.Restore()
	select {
	case r := <-res:
		if r.err != nil {
			t.Fatalf("New after the store came back: %v", r.err)
		}
		r.a.close(ctx)
	case <-time.After(30 * time.Second):
		t.Fatal("New did not return within 30 s of the store's return")
	}

	// The window ends: the start fails with the reason and the attempts.
	proxy.Cut()
	began := time.Now()
	_, err = New(ctx, loadConfig(t, yml(via, "2s")), registry(), WithLogOutput(io.Discard))
	if err == nil || !strings.Contains(err.Error(), "store.start-timeout") || time.Since(began) > 20*time.Second {
		t.Fatalf("the store down past start-timeout: %v after %s", err, time.Since(began))
	}
	// A refusal is not retried.
	began = time.Now()
	refused := strings.Replace(dsn, "root@", "no_such_role_msgx@", 1)
	_, err = New(ctx, loadConfig(t, yml(refused, "1m")), registry(), WithLogOutput(io.Discard))
	if err == nil || time.Since(began) > 10*time.Second {
		t.Fatalf("a refused login: %v after %s", err, time.Since(began))
	}
}
