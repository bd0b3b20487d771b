package sis_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/pipeline/sis"
	"github.com/msgx/msgx/pipeline/sis/sisxml"
	"github.com/msgx/msgx/source/mailbox"
	"github.com/msgx/msgx/store"
	"github.com/msgx/msgx/store/storetest"
)

// outboundTable creates an outbound mailbox (COUTMSGS shape) of its own on
// the test MariaDB.
func outboundTable(t *testing.T) (*mailbox.Outbound, *sql.DB) {
	t.Helper()
	raw := storetest.OpenMySQL(t)
	out, err := mailbox.NewOutbound(raw, mailbox.WithOutboundTable(storetest.UniqueName("t_sis_coutmsgs_")))
	if err != nil {
		t.Fatal(err)
	}
	if err := out.Create(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = out.Drop(context.Background()) })
	return out, raw
}

// requests is a coordinator on db with its outbound table and fake clock,
// started a minute before the harness's processing time t0.
type requests struct {
	c   *sis.Coordinator
	out *mailbox.Outbound
	raw *sql.DB
	clk *clock.Fake
	db  *store.DB
}

func newRequests(t *testing.T, db *store.DB) *requests {
	t.Helper()
	out, raw := outboundTable(t)
	clk := clock.NewFake(t0.Add(-time.Minute))
	c, err := sis.NewCoordinator(db, out, sis.WithRequestClock(clk), sis.WithSenderCode("MSGXT"),
		sis.WithRequestTimeout(5*time.Minute), sis.WithRequestLogger(testkit.Quiet()))
	if err != nil {
		t.Fatal(err)
	}
	return &requests{c: c, out: out, raw: raw, clk: clk, db: db}
}

func (r *requests) list(t *testing.T) map[int64]sis.Request {
	t.Helper()
	l, err := sis.ListRequests(context.Background(), r.db, "", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]sis.Request{}
	for _, q := range l {
		out[q.ID] = q
	}
	return out
}

// rqfd sends an RQFD for 23 Jan 2021.
func (r *requests) rqfd(t *testing.T) sis.Request {
	t.Helper()
	day := time.Date(2021, 1, 23, 0, 0, 0, 0, sisxml.DefaultLocation())
	q, err := r.c.Request(context.Background(), sis.RQFD, sis.RequestParams{From: day, To: day.Add(24*time.Hour - time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// resp is the real schedule as a RESP dated at (airport time).
func resp(t *testing.T, seq int64, at time.Time) []byte {
	t.Helper()
	m := replace(t, fixture(t, "SCHD_DNLD_1.xml"), "<STYP>DNLD</STYP>", "<STYP>RESP</STYP>")
	m = replace(t, m, "<DTTM>20181105223126</DTTM>", "<DTTM>"+at.In(sisxml.DefaultLocation()).Format("20060102150405")+"</DTTM>")
	return withSeq(m, seq)
}

// TestRequestAnsweredByRESP: an RQFD goes to the outbound mailbox as SIS.md
// says and is SENT; the RESP dated after it is applied and the request is
// DONE with it; the same answer again matches nothing.
func TestRequestAnsweredByRESP(t *testing.T) {
	storetest.Each(t, []store.Line{sis.Schema()}, func(t *testing.T, db *store.DB) {
		r := newRequests(t, db)
		q := r.rqfd(t)
		if q.Status != sis.ReqSent || q.Seq != 1 || q.OutboundID == nil || q.AnswerType != "SCHD" {
			t.Fatalf("request %+v", q)
		}
		var body, routing string
		if err := r.raw.QueryRow("SELECT COUTMSGS_CLOB_MSG, ROUTINGID FROM "+r.out.Name()+" WHERE COUTMSGS_ID = ?", *q.OutboundID).Scan(&body, &routing); err != nil {
			t.Fatal(err)
		}
		m, err := sisxml.Decode([]byte(body), sisxml.Options{})
		if err != nil {
			t.Fatalf("the request does not decode: %v\n%s", err, body)
		}
		if m.Meta.Sender != "MSGXT" || m.Meta.Type != "RQFD" || m.Meta.Subtype != "NONE" || m.Meta.Seq != 1 ||
			m.Body[0].ChildText("STDB") != "23JAN210000" || m.Body[0].ChildText("STDE") != "23JAN212359" || routing != "SIS" {
			t.Fatalf("request message %+v %v:\n%s", m.Meta, routing, body)
		}

		h := newHarness(t, db, sis.Config{RequestGuard: true})
		if out := h.ok(resp(t, 501, t0.Add(-30*time.Second))); out != inbox.Done() || h.flight("16") == nil {
			t.Fatalf("RESP: %+v", out)
		}
		got := r.list(t)[q.ID]
		if got.Status != sis.ReqDone || got.AnswerMsgID == nil || *got.AnswerMsgID != 1 || got.Reason != "" {
			t.Fatalf("request after the RESP: %+v", got)
		}
		if out := h.ok(resp(t, 502, t0)); out != inbox.Skip("no-match:no-open-request") {
			t.Fatalf("a second RESP: %+v", out)
		}
		if q2 := r.rqfd(t); q2.Seq != 2 {
			t.Fatalf("second SEQN %d", q2.Seq)
		}
	})
}

// TestRequestGuardNoMatch: a RESP with no request, one dated before the
// request was sent, one after the request expired or was superseded, all
// SKIPPED no-match with the snapshot untouched; a tolerated clock skew
// matches and is noted.
func TestRequestGuardNoMatch(t *testing.T) {
	storetest.Each(t, []store.Line{sis.Schema()}, func(t *testing.T, db *store.DB) {
		h := newHarness(t, db, sis.Config{RequestGuard: true})
		untouched := func(what string) {
			t.Helper()
			if h.flight("16") != nil || len(h.events()) != 0 {
				t.Fatalf("%s: the snapshot was applied", what)
			}
		}
		if out := h.ok(resp(t, 601, t0)); out != inbox.Skip("no-match:no-open-request") {
			t.Fatalf("no request: %+v", out)
		}
		untouched("no request")

		r := newRequests(t, db)
		q1 := r.rqfd(t)
		out := h.ok(resp(t, 602, t0.Add(-2*time.Minute)))
		if out.Status != inbox.Skipped || !strings.HasPrefix(out.Reason, "no-match:late:") {
			t.Fatalf("late RESP: %+v", out)
		}
		untouched("late")

		q2 := r.rqfd(t)
		l := r.list(t)
		if l[q1.ID].Status != sis.ReqExpired || l[q1.ID].Reason != "superseded by a new request" || l[q2.ID].Status != sis.ReqSent {
			t.Fatalf("after a second RQFD: %+v / %+v", l[q1.ID], l[q2.ID])
		}

		// The dispatcher sends it: WAITING.
		if _, err := r.raw.Exec("UPDATE "+r.out.Name()+" SET COUTMSGS_DATE_SENT = NOW() WHERE COUTMSGS_ID = ?", *q2.OutboundID); err != nil {
			t.Fatal(err)
		}
		if err := r.c.Check(context.Background()); err != nil {
			t.Fatal(err)
		}
		if s := r.list(t)[q2.ID].Status; s != sis.ReqWaiting {
			t.Fatalf("after the dispatcher sent it: %s", s)
		}

		// Its time is up.
		r.clk.Advance(5 * time.Minute)
		if err := r.c.Check(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := r.list(t)[q2.ID]; got.Status != sis.ReqExpired || got.Reason != "timeout" {
			t.Fatalf("after the timeout: %+v", got)
		}
		if out := h.ok(resp(t, 603, t0)); out != inbox.Skip("no-match:request 2 expired") {
			t.Fatalf("RESP after expiry: %+v", out)
		}
		untouched("expired")

		// A clock-skew tolerance lets a slightly early DTTM match, noted.
		q3 := r.rqfd(t)
		skewed := newHarness(t, db, sis.Config{RequestGuard: true, RequestSkew: 2 * time.Minute})
		skewed.next = 100
		if out := skewed.ok(resp(t, 604, r.clk.Now().Add(-time.Minute))); out != inbox.Done() {
			t.Fatalf("skewed RESP: %+v", out)
		}
		if got := r.list(t)[q3.ID]; got.Status != sis.ReqDone || !strings.Contains(got.Reason, "clock skew") {
			t.Fatalf("skewed match: %+v", got)
		}
	})
}

// TestRequestRQRDReplacesTheSet: an RQRD for GLST, answered by the real
// GLST RESP (guarded), replaces the stored GLST set.
func TestRequestRQRDReplacesTheSet(t *testing.T) {
	storetest.Each(t, []store.Line{sis.Schema()}, func(t *testing.T, db *store.DB) {
		h := newHarness(t, db, sis.Config{RequestGuard: true})
		other := replace(t, fixture(t, "GLST_DNLD_1.xml"), "<GCOD>G17</GCOD>", "<GCOD>G99</GCOD>")
		if out := h.ok(other); out != inbox.Done() {
			t.Fatalf("DNLD: %+v", out)
		}
		r := newRequests(t, db)
		q, err := r.c.Request(context.Background(), sis.RQRD, sis.RequestParams{RefType: "glst"})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(q.Body, "<RTYP>GLST</RTYP>") || !strings.Contains(q.Body, "<STYP>GLST</STYP>") || q.AnswerType != "GLST" {
			t.Fatalf("RQRD body:\n%s", q.Body)
		}
		glst := replace(t, fixture(t, "GLST_RESP_1.xml"), "<DTTM>20021010090311</DTTM>", "<DTTM>"+t0.In(sisxml.DefaultLocation()).Format("20060102150405")+"</DTTM>")
		if out := h.ok(glst); out != inbox.Done() {
			t.Fatalf("RESP: %+v", out)
		}
		if keys := h.refs("GLST"); len(keys) != 1 || keys["G17"].Version != 1 {
			t.Fatalf("GLST after the RESP: %+v", keys)
		}
		if got := r.list(t)[q.ID]; got.Status != sis.ReqDone {
			t.Fatalf("request %+v", got)
		}
	})
}

// TestRequestNotSent: in shadow mode nothing is written; a failed outbound
// insert leaves the request EXPIRED with the error, never SENT.
func TestRequestNotSent(t *testing.T) {
	storetest.Each(t, []store.Line{sis.Schema()}, func(t *testing.T, db *store.DB) {
		r := newRequests(t, db)
		shadow, err := sis.NewCoordinator(db, r.out, sis.WithShadow(true))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := shadow.Request(context.Background(), sis.RQFD, sis.RequestParams{From: t0, To: t0}); !errors.Is(err, sis.ErrShadow) {
			t.Fatalf("shadow: %v", err)
		}
		if n := len(r.list(t)); n != 0 {
			t.Fatalf("shadow mode registered %d requests", n)
		}
		if err := r.out.Drop(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := r.c.Request(context.Background(), sis.RQFD, sis.RequestParams{From: t0, To: t0}); err == nil {
			t.Fatal("a request without its outbound table was sent")
		}
		for _, q := range r.list(t) {
			if q.Status != sis.ReqExpired || !strings.HasPrefix(q.Reason, "not sent: ") {
				t.Fatalf("request %+v", q)
			}
		}
		if _, err := r.c.Request(context.Background(), "RQXX", sis.RequestParams{}); err == nil {
			t.Fatal("unknown kind accepted")
		}
	})
}

// TestRequestsAPI: POST sends a request, the "requests" query lists it,
// pages and filters.
func TestRequestsAPI(t *testing.T) {
	storetest.Each(t, []store.Line{sis.Schema()}, func(t *testing.T, db *store.DB) {
		r := newRequests(t, db)
		post := func(body string) *httptest.ResponseRecorder {
			w := httptest.NewRecorder()
			r.c.Handler().ServeHTTP(w, httptest.NewRequest("POST", "/v1/requests", strings.NewReader(body)))
			return w
		}
		if w := post(`{"kind":"RQRD","refType":"AIRL"}`); w.Code != 201 || !strings.Contains(w.Body.String(), `"status":"SENT"`) {
			t.Fatalf("POST: %d %s", w.Code, w.Body)
		}
		if w := post(`{"kind":"RQRD","refType":"NOPE"}`); w.Code != 400 {
			t.Fatalf("bad POST: %d %s", w.Code, w.Body)
		}
		post(`{"kind":"RQRD","refType":"ARPT"}`)
		post(`{"kind":"RQRD","refType":"AIRL"}`) // expires the first
		q := sis.RequestsQuery(db)
		page, err := q(context.Background(), map[string][]string{"limit": {"2"}})
		if err != nil {
			t.Fatal(err)
		}
		res := page.(map[string]any)
		if list := res["requests"].([]sis.Request); len(list) != 2 || list[0].ID != 3 || res["next"] != int64(2) {
			t.Fatalf("page %+v", res)
		}
		page, _ = q(context.Background(), map[string][]string{"status": {"EXPIRED"}})
		if list := page.(map[string]any)["requests"].([]sis.Request); len(list) != 1 || list[0].ID != 1 {
			t.Fatalf("expired %+v", list)
		}
		if _, err := q(context.Background(), map[string][]string{"limit": {"0"}}); err == nil {
			t.Fatal("limit 0 accepted")
		}
	})
}

// TestScenarioRequestsThroughTheMailboxes: end to end with the real engine,
// the MariaDB inbound mailbox (CMINMSGS) and outbound mailbox (COUTMSGS),
// PostgreSQL state: a RESP nobody asked for is skipped; an RQFD goes out,
// its RESP comes in and is applied, the request DONE; the same for an RQRD.
func TestScenarioRequestsThroughTheMailboxes(t *testing.T) {
	p := newPipe(t, sis.Config{RequestGuard: true})
	out, raw := outboundTable(t)
	c, err := sis.NewCoordinator(p.db, out, sis.WithRequestLogger(testkit.Quiet()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rows := p.settle(p.put(resp(t, 801, time.Now()))...)
	if got := outcomes(rows)[0]; got.Status != inbox.Skipped || got.Reason != "no-match:no-open-request" {
		t.Fatalf("unasked RESP: %+v", got)
	}
	if p.harness().flight("16") != nil {
		t.Fatal("an unasked RESP was applied")
	}

	day := time.Date(2021, 1, 23, 0, 0, 0, 0, sisxml.DefaultLocation())
	q, err := c.Request(ctx, sis.RQFD, sis.RequestParams{From: day, To: day.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := raw.QueryRow("SELECT count(*) FROM " + out.Name() + " WHERE COUTMSGS_CLOB_MSG LIKE '%<RQFD>%'").Scan(&n); err != nil || n != 1 {
		t.Fatalf("COUTMSGS rows %d (%v)", n, err)
	}
	ids := p.put(resp(t, 802, time.Now()))
	if got := outcomes(p.settle(ids...))[0]; got != succeeded {
		t.Fatalf("RESP to the RQFD: %+v", got)
	}
	if p.harness().flight("16") == nil {
		t.Fatal("the RESP was not applied")
	}
	l, err := sis.ListRequests(ctx, p.db, sis.ReqDone, 0, 10)
	if err != nil || len(l) != 1 || l[0].ID != q.ID || *l[0].AnswerMsgID != ids[0] {
		t.Fatalf("done requests %+v (%v)", l, err)
	}

	if _, err := c.Request(ctx, sis.RQRD, sis.RequestParams{RefType: "GLST"}); err != nil {
		t.Fatal(err)
	}
	glst := replace(t, fixture(t, "GLST_RESP_1.xml"), "<DTTM>20021010090311</DTTM>", "<DTTM>"+time.Now().In(sisxml.DefaultLocation()).Format("20060102150405")+"</DTTM>")
	if got := outcomes(p.settle(p.put(withSeq(glst, 803))...))[0]; got != succeeded {
		t.Fatalf("RESP to the RQRD: %+v", got)
	}
	if l, _ := sis.ListRequests(ctx, p.db, sis.ReqDone, 0, 10); len(l) != 2 || l[0].AnswerType != "GLST" {
		t.Fatalf("done requests %+v", l)
	}
}
