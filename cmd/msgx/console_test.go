package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/pipeline/sis"
	"github.com/msgx/msgx/pipeline/sis/traffic"
	"github.com/msgx/msgx/store"
)

// browserPath finds a Chromium. Without one the test skips, unless
// MSGX_REQUIRE_BROWSER=1 (CI installs the Debian package chromium) makes
// its absence a failure.
func browserPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no Chromium on PATH (install the Debian package chromium) for the console's browser test"
	if os.Getenv("MSGX_REQUIRE_BROWSER") == "1" {
		t.Fatal(msg + "; MSGX_REQUIRE_BROWSER=1 requires it")
	}
	t.Skip(msg)
	return ""
}

// TestConsoleBrowser drives the web console of the real binary with a
// headless Chromium: it is refused without a token, loads every page, shows
// a dead letter whose payload is a script as inert text, and replays an
// outbox dead letter through the dry run and the confirmation until it is
// sent. With MSGX_CONSOLE_SCREENSHOTS=DIR it saves a PNG of each page there
// (docs/console holds them).
func TestConsoleBrowser(t *testing.T) {
	chromium := browserPath(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bin := buildMsgx(t)
	deps := newProdDeps(t, ctx)
	svc := startService(t, bin, deps.env())
	base := "http://" + svc.admin + "/console/"

	// A hostile payload posted to the ingress: MALFORMED, a dead letter.
	const hostile = `<script>window.__pwned=1</script>`
	resp, err := http.Post("http://"+svc.ingest+"/cminmsgs/send", "application/xml", strings.NewReader(hostile))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("ingress: %d %s", resp.StatusCode, body)
	}
	hostileID := strings.TrimSpace(string(body))
	// Real traffic: the bundled SIS messages through the ingress, in the
	// demo's order (the schedule first, the FDEL last).
	// (The reference data's topic, sis.ref, is seeded with the cluster.)
	msgs, err := traffic.Ordered(5000)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		resp, err := http.Post("http://"+svc.ingest+"/cminmsgs/send", "application/xml", bytes.NewReader(m))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("ingress: %d %s", resp.StatusCode, b)
		}
	}
	testkit.Eventually(t, "flight 15 to be DELETED at version 40", 60*time.Second, func() bool {
		code, b := svc.get(t, "/v1/flights?flid=15", readTok)
		var page sis.FlightPage
		return code == 200 && json.Unmarshal(b, &page) == nil && len(page.Flights) == 1 &&
			page.Flights[0].Status == sis.StatusDeleted && page.Flights[0].StateVersion == 40
	})
	// An outbox dead letter: an event for a topic that does not exist yet.
	db, err := store.Open(ctx, deps.pgDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		return outbox.Enqueue(ctx, tx, time.Now(), outbox.Event{ID: "late-ui", Target: "kafka:msg", Topic: "late", Key: "k", Payload: []byte(`{}`)})
	}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the event for the missing topic to go DEAD", 30*time.Second, func() bool {
		r, err := outbox.Get(ctx, db, "late-ui")
		return err == nil && r.Status == outbox.StatusDead
	})
	testkit.Eventually(t, "the hostile message to go DEAD", 30*time.Second, func() bool {
		code, b := svc.get(t, "/v1/dead?source=inbox", readTok)
		return code == 200 && bytes.Contains(b, []byte(`"MALFORMED"`))
	})
	if _, err := kadm.NewClient(mustClient(t, deps.seeds)).CreateTopic(ctx, 1, 1, nil, "late"); err != nil {
		t.Fatal(err)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1440, 1000))
	actx, stopAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer stopAlloc()
	bctx, stopBrowser := chromedp.NewContext(actx)
	defer stopBrowser()
	if err := chromedp.Do(bctx); err != nil { // starts the browser
		t.Fatalf("starting %s: %v", chromium, err)
	}
	// Every step below is bounded; the whole drive takes seconds.
	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, 20*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, 20*time.Second)
		defer cancel()
		s, err := chromedp.Run(sctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	shots := os.Getenv("MSGX_CONSOLE_SCREENSHOTS")
	shot := func(name string) {
		t.Helper()
		if shots == "" {
			return
		}
		sctx, cancel := context.WithTimeout(bctx, 20*time.Second)
		defer cancel()
		png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// Refused without the token: every page leads to the login form, and a
	// wrong token is turned away.
	run("open the dead letters without a session", chromedp.Navigate(base+"dead"), chromedp.WaitVisible(chromedp.CSS(`input[name="token"]`)))
	shot("login")
	run("log in with a wrong token", chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), "not-a-token-0123456789"),
		chromedp.Submit(chromedp.CSS(`input[name="token"]`)), chromedp.WaitVisible(chromedp.CSS(".alert")))
	if s := text(".alert"); !strings.Contains(s, "not a read or operator token") {
		t.Errorf("wrong token: %q", s)
	}

	run("log in as the operator", chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), opTok),
		chromedp.SendKeys(chromedp.CSS(`input[name="name"]`), "night shift"),
		chromedp.Submit(chromedp.CSS(`input[name="token"]`)), chromedp.WaitVisible(chromedp.CSS(`[data-refresh]`)))
	if s := text("main"); !strings.Contains(s, "sis") || !strings.Contains(s, "kafka:msg") || !strings.Contains(s, "connected") {
		t.Errorf("overview:\n%s", s)
	}
	shot("overview")

	// The hostile payload renders as text; its script never ran.
	run("open the hostile dead letter", chromedp.Navigate(base+"dead/inbox/sis/"+hostileID), chromedp.WaitVisible(chromedp.CSS("#payload")))
	if s := text("#payload"); s != hostile {
		t.Errorf("payload shown as %q", s)
	}
	sctx, scancel := context.WithTimeout(bctx, 20*time.Second)
	pwned, err := chromedp.Run(sctx, chromedp.Evaluate[string]("typeof window.__pwned"))
	scancel()
	if err != nil || pwned != "undefined" {
		t.Errorf("window.__pwned is %q (%v): the payload's script ran", pwned, err)
	}
	shot("dead-letter")

	// Replay the outbox dead letter: select, dry run, confirm, progress.
	run("open the dead letters", chromedp.Navigate(base+"dead"), chromedp.WaitVisible(chromedp.CSS(`input[value="late-ui"]`)))
	if s := text("main"); !strings.Contains(s, "MALFORMED") || !strings.Contains(s, "late-ui") {
		t.Errorf("dead letters:\n%s", s)
	}
	shot("dead-letters")
	run("select and dry-run", chromedp.Click(chromedp.CSS(`input[value="late-ui"]`)),
		chromedp.Submit(chromedp.CSS(`input[value="late-ui"]`)), chromedp.WaitVisible(chromedp.CSS(`input[name="reason"]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name="reason"]`), "topic created"))
	shot("replay")
	run("dry run", chromedp.Click(chromedp.CSS("#dry-run")), chromedp.WaitVisible(chromedp.CSS("#dry-run-result")))
	if s := text("#dry-run-result"); !strings.Contains(s, "1 would be replayed") {
		t.Errorf("dry run: %q", s)
	}
	if r, _ := outbox.Get(ctx, db, "late-ui"); r.Status != outbox.StatusDead {
		t.Fatalf("the dry run replayed: %s", r.Status)
	}
	shot("replay-dry-run")
	run("confirm", chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#replay-done")))
	pctx, pcancel := context.WithTimeout(bctx, 30*time.Second)
	_, err = chromedp.Run(pctx, chromedp.Poll[bool](`(document.querySelector("#progress-summary")||{}).textContent === "All 1 settled."`,
		chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(25*time.Second)))
	pcancel()
	if err != nil {
		t.Fatalf("the replay's progress did not reach all settled: %v", err)
	}
	if s := text("#progress"); !strings.Contains(s, "SENT") {
		t.Errorf("progress: %q", s)
	}
	shot("replay-done")
	if r, _ := outbox.Get(ctx, db, "late-ui"); r.Status != outbox.StatusSent {
		t.Errorf("after the replay the event is %s", r.Status)
	}
	var actor string
	if err := db.QueryRow(ctx, "SELECT actor FROM msgx_admin_audit WHERE NOT dry_run").Scan(&actor); err != nil || !strings.Contains(actor, "night shift") {
		t.Errorf("the replay's audit: %q %v", actor, err)
	}

	// The airport operator's question: find flight 15 by its number, read
	// a field and its routes, open its history and follow the deleting
	// version to its message, and back.
	run("find flight YG9028", chromedp.Navigate(base+"flights"), chromedp.WaitVisible(chromedp.CSS(`input[name="flno"]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name="flno"]`), "YG9028"), chromedp.Submit(chromedp.CSS(`input[name="flno"]`)),
		// The unfiltered page lists flight 15 too: wait for the search's own answer.
		chromedp.WaitVisible(chromedp.CSS("#search-for")))
	if s := text("#flights tbody"); !strings.Contains(s, "YG9028") || !strings.Contains(s, "DELETED") {
		t.Errorf("the search's answer:\n%s", s)
	}
	shot("flights")
	run("open flight 15", chromedp.Click(chromedp.CSS(`#flights a[href$="/flights/15"]`)), chromedp.WaitVisible(chromedp.CSS("#flight-status")))
	if st, v := text("#flight-status"), text("#flight-version"); st != "DELETED" || v != "40" {
		t.Errorf("flight 15 is %q at version %q", st, v)
	}
	if s := text(`tr[data-field="FLNO"] td.value`); s != "YG9028" {
		t.Errorf("FLNO reads %q", s)
	}
	if s := text(`table[data-collection="ROUT"]`); !strings.Contains(s, "Airport") {
		t.Errorf("the routes table:\n%s", s)
	}
	shot("flight")
	run("open its raw JSON", chromedp.Click(chromedp.CSS("#json-link")), chromedp.WaitVisible(chromedp.CSS("#flight-json")))
	if s := text("#flight-json"); !strings.Contains(s, `"stateVersion": 40`) {
		t.Errorf("raw JSON:\n%.500s", s)
	}
	run("back to the flight and its history", chromedp.Click(chromedp.CSS(`main p a[href$="/flights/15"]`)), chromedp.WaitVisible(chromedp.CSS("#history-link")),
		chromedp.Click(chromedp.CSS("#history-link")), chromedp.WaitVisible(chromedp.CSS("#v15-40")))
	if s := text("#v15-40"); !strings.Contains(s, "FLOP/FDEL") || !strings.Contains(s, "ACTIVE → DELETED") || !strings.Contains(s, "ago") {
		t.Errorf("version 40:\n%s", s)
	}
	shot("flight-history")
	run("follow version 40 to its message", chromedp.Click(chromedp.CSS("#v15-40 a.msg-link")), chromedp.WaitVisible(chromedp.CSS("#effects")))
	if s := text("#effects"); !strings.Contains(s, "Flight 15, version 40") {
		t.Errorf("the message's effects:\n%s", s)
	}
	if s := text("main"); !strings.Contains(s, "SUCCEEDED") || !strings.Contains(s, "FDEL") {
		t.Errorf("the message page:\n%s", s)
	}
	shot("message")
	run("and back to the flight", chromedp.Click(chromedp.CSS(`#effects a[href$="/flights/15"]`)), chromedp.WaitVisible(chromedp.CSS("#flight-status")))

	for _, p := range []struct{ path, want string }{
		// The requests query answers (this run sends no request).
		{"requests", "requests\t[]"},
		{"gaps", "No gap has been declared"},
	} {
		run("open "+p.path, chromedp.Navigate(base+p.path), chromedp.WaitVisible(chromedp.CSS("main h1")))
		if s := text("main"); !strings.Contains(s, p.want) {
			t.Errorf("%s: want %q in\n%s", p.path, p.want, s)
		}
		shot(p.path)
	}

	// The read scope sees the dead letters but no action.
	run("log out", chromedp.Click(chromedp.CSS("button.link")), chromedp.WaitVisible(chromedp.CSS(`input[name="token"]`)))
	run("log in with the read token", chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), readTok),
		chromedp.Submit(chromedp.CSS(`input[name="token"]`)), chromedp.WaitVisible(chromedp.CSS(`[data-refresh]`)),
		chromedp.Navigate(base+"dead"), chromedp.WaitVisible(chromedp.CSS("main h1")))
	sctx, scancel = context.WithTimeout(bctx, 20*time.Second)
	actions, err := chromedp.Run(sctx, chromedp.Evaluate[int](`document.querySelectorAll('input[type=checkbox], button[type=submit]:not(.link)').length - document.querySelectorAll('form.filters button').length`))
	scancel()
	if err != nil || actions != 0 {
		t.Errorf("the read scope sees %d action controls on the dead letters (%v)", actions, err)
	}
	if s := text("main"); !strings.Contains(s, "MALFORMED") {
		t.Errorf("the read scope's dead letters:\n%s", s)
	}
	svc.stop(t)
}
