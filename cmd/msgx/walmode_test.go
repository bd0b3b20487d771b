package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/msgx/msgx/admin"
	"github.com/msgx/msgx/app"
	"github.com/msgx/msgx/app/config"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/pipeline/sis/traffic"
	"github.com/msgx/msgx/source/mailbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// The SIS stream runs on either outbox mode by configuration: the bundled
// traffic through a store mailbox publishes the same msg and ref events with
// outbox.mode table and with outbox.mode wal, and the wal mode leaves no row
// in msgx_outbox.
func TestSISOnBothOutboxModes(t *testing.T) {
	table := runSIS(t, "table", func(db *store.DB) bool { return countOf(t, db, "SELECT count(*) FROM msgx_outbox") == 0 }, nil)
	wal := runSIS(t, "wal", nil, table)
	t.Logf("events published, table mode %v, wal mode %v", table, wal)
	for _, topic := range []string{"sis.msg", "sis.ref"} {
		if table[topic] == 0 || wal[topic] != table[topic] {
			t.Errorf("%s: %d events in the table mode, %d in the wal mode", topic, table[topic], wal[topic])
		}
	}
}

// runSIS runs the SIS stream over the bundled traffic in one outbox mode
// until every message is processed and drained says the events are out (or,
// given want, until the broker has that many per topic), and returns the
// events published per topic.
func runSIS(t *testing.T, mode string, drained func(*store.DB) bool, want map[string]int) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, dsn := storetest.NewSchema(t)
	db, err := store.Open(ctx, dsn, store.WithMigrate(), store.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	box, err := mailbox.NewStore(db)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := traffic.Ordered(time.Now().UnixNano() % 1_000_000_000)
	if err != nil {
		t.Fatal(err)
	}
	slot := storetest.UniqueName("msgx_t_")
	if mode == "wal" {
		t.Cleanup(func() { dropSlot(t, slot) })
	}
	yml := fmt.Sprintf(`store: {dsn: %q}
admin: {listen: "127.0.0.1:0", read-token: %q, operator-token: %q}
brokers: {local: {kind: mem}}
mailboxes: {local: {kind: store, table: %s, start: from-beginning, poll-interval: 20ms}}
streams: {sis: {processor: sis, mailbox: local, poll-interval: 20ms}}
outbox: {mode: %s, slot: %s}
relay:
  poll-interval: 20ms
  targets:
    "kafka:msg": {broker: local, lane: per-key}
    "kafka:ref": {broker: local, lane: per-key}
    "kafka:schd": {broker: local, lane: compacted}
`, dsn, readTok, opTok, box.Name(), mode, slot)
	a, stop := runApp(t, mode+" mode", yml)
	defer stop()
	for _, m := range msgs {
		if _, err := box.Insert(ctx, m, time.Now(), mailbox.Meta{}); err != nil {
			t.Fatal(err)
		}
	}
	var got map[string]int
	testkit.Eventually(t, mode+" mode: every message processed and its events published", 90*time.Second, func() bool {
		if countOf(t, db, "SELECT count(*) FROM msgx_inbox WHERE stream = 'sis' AND status NOT IN ('SUCCEEDED', 'SKIPPED', 'DEAD')") != 0 ||
			countOf(t, db, "SELECT count(*) FROM msgx_inbox WHERE stream = 'sis'") < len(msgs) {
			return false
		}
		got = published(t, a.AdminAddr())
		if want != nil {
			return got["sis.msg"] >= want["sis.msg"] && got["sis.ref"] >= want["sis.ref"]
		}
		return drained(db)
	})
	if mode == "wal" {
		if n := countOf(t, db, "SELECT count(*) FROM msgx_outbox"); n != 0 {
			t.Errorf("the wal mode left %d rows in msgx_outbox", n)
		}
		var st admin.Status
		req, _ := http.NewRequest("GET", "http://"+a.AdminAddr()+"/v1/status", nil)
		req.Header.Set("Authorization", "Bearer "+readTok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if st.WAL == nil || st.WAL.Slot != slot || !st.WAL.Holder {
			t.Errorf("/v1/status shows the wal slot as %+v, want %s held by this instance", st.WAL, slot)
		}
		var out strings.Builder
		if err := printStatus(&out, st); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), "WAL SLOT") || !strings.Contains(out.String(), "this instance") {
			t.Errorf("msgx status printed:\n%s", out.String())
		}
		// The WAL relay's series the alert rules use (TestServeProduction
		// checks the others, in the table mode).
		metrics := metricsText(t, a.AdminAddr())
		// The mode-independent series count the WAL relay's sends too.
		if all, wal := metricSum(t, metrics, "msgx_outbox_published_total"), metricSum(t, metrics, "msgx_outbox_wal_published_total"); wal == 0 || all != wal {
			t.Errorf("msgx_outbox_published_total %v, msgx_outbox_wal_published_total %v: want the same, above 0", all, wal)
		}
		for _, m := range walOnlyMetrics {
			if !strings.Contains(metrics, "\n"+m) {
				t.Errorf("the wal mode's /metrics lacks %s, which the alert rules use", m)
			}
		}
	}
	return got
}

func countOf(t *testing.T, db *store.DB, q string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// metricsText is the admin listener's /metrics.
func metricsText(t *testing.T, addr string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+addr+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+readTok)
	resp, err := http.DefaultClient.Do(req)
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

// published reads msgx_broker_published_total per topic from /metrics.
func published(t *testing.T, addr string) map[string]int {
	t.Helper()
	out := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(metricsText(t, addr)))
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "msgx_broker_published_total{") {
			continue
		}
		_, rest, _ := strings.Cut(l, `topic="`)
		topic, _, _ := strings.Cut(rest, `"`)
		f := strings.Fields(l)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatal(err)
		}
		out[topic] += int(v)
	}
	return out
}

func dropSlot(t *testing.T, slot string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, storetest.PostgresURL())
	if err != nil {
		t.Logf("drop slot %s: %v", slot, err)
		return
	}
	defer conn.Close(ctx)
	for ctx.Err() == nil {
		if _, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", slot); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// metricSum adds up the samples of a counter family in a /metrics text.
func metricSum(t *testing.T, text, name string) float64 {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	if f := fams[name]; f != nil {
		for _, m := range f.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// runApp runs the service in this process on the configuration yml until
// stop, which reports an error of Run (named by what).
func runApp(t *testing.T, what, yml string) (a *app.App, stop func()) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "msgx.yaml")
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, nil, adapters())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a, err = app.New(ctx, cfg, newRegistry(), app.WithLogOutput(io.Discard))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	return a, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: Run: %v", what, err)
		}
	}
}
