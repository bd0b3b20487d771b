package console

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/msgx/msgx/admin"
)

// payloadLimit bounds the payload a dead letter's page shows.
const payloadLimit = 64 << 10

// replayLimit bounds what one replay from the console selects.
const replayLimit = 1000

// fail renders an admin error: a refusal with its own status and text (501
// for a query no pipeline provides), else 500 with a reference to the log
// line that has the cause.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, s session, err error) {
	status, msg := c.adm.PublicError(r, err)
	v := c.view(s)
	c.render(w, status, v, errorPage(v, http.StatusText(status), msg))
}

// failText answers a fragment's error as text, as fail does.
func (c *Console) failText(w http.ResponseWriter, r *http.Request, err error) {
	status, msg := c.adm.PublicError(r, err)
	http.Error(w, msg, status)
}

func (c *Console) overviewData(ctx context.Context) (overviewView, error) {
	st, err := c.adm.Status(ctx)
	if err != nil {
		return overviewView{}, err
	}
	checks, ready := c.adm.Ready(ctx)
	var brokers, others []admin.CheckResult
	for _, ch := range checks {
		if name, ok := strings.CutPrefix(ch.Name, "broker "); ok {
			ch.Name = name
			brokers = append(brokers, ch)
		} else {
			others = append(others, ch)
		}
	}
	return overviewView{Status: st, Brokers: brokers, Checks: others, Ready: ready, Charts: c.charts()}, nil
}

func (c *Console) overview(ctx context.Context, w http.ResponseWriter, r *http.Request, s session) {
	d, err := c.overviewData(ctx)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.render(w, http.StatusOK, c.view(s), overviewPage(d))
}

func (c *Console) overviewFragment(ctx context.Context, w http.ResponseWriter, r *http.Request, _ session) {
	d, err := c.overviewData(ctx)
	if err != nil {
		c.failText(w, r, err)
		return
	}
	c.write(w, http.StatusOK, "overview", overviewBody(d))
}

// parseTime reads a filter's time: RFC 3339 or the form's local-time
// input, taken as UTC.
func parseTime(v string) (time.Time, bool) {
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04", "2006-01-02T15:04:05", "2006-01-02"} {
		if t, err := time.Parse(layout, v); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

func (c *Console) deadList(ctx context.Context, w http.ResponseWriter, r *http.Request, s session) {
	q := r.URL.Query()
	f := admin.DeadFilter{Source: q.Get("source"), Stream: q.Get("stream"), Class: strings.ToUpper(q.Get("class")), Target: q.Get("target"), Limit: 1000}
	v := c.view(s)
	d := deadView{F: deadFilter{Source: q.Get("source"), Stream: q.Get("stream"), Class: q.Get("class"), Target: q.Get("target"),
		Since: q.Get("since"), Until: q.Get("until")},
		Streams: c.adm.StreamNames(), Targets: c.adm.TargetNames(),
		Classes: []string{"CODEC_ERROR", "UNSUPPORTED", "INFRA", "EXHAUSTED", "MALFORMED", "BUSINESS"}}
	var since, until time.Time
	for name, dst := range map[string]*time.Time{"since": &since, "until": &until} {
		if raw := q.Get(name); raw != "" {
			t, ok := parseTime(raw)
			if !ok {
				c.render(w, http.StatusBadRequest, v, errorPage(v, "Bad filter", name+": "+strconv.Quote(raw)+" is not a time (2026-12-01T03:00)"))
				return
			}
			*dst = t
		}
	}
	// A class filters the inbox only, a target the outbox only.
	if f.Class != "" && f.Source == "" {
		f.Source = "inbox"
	}
	if f.Target != "" && f.Source == "" {
		f.Source = "outbox"
	}
	dl, err := c.adm.DeadLetters(ctx, f)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	in := func(t time.Time) bool {
		return (since.IsZero() || !t.Before(since)) && (until.IsZero() || t.Before(until))
	}
	for _, m := range dl.Inbox {
		if in(m.ReceivedAt) {
			d.Inbox = append(d.Inbox, m)
			d.AnyReplayable = d.AnyReplayable || m.Replayable
		}
	}
	for _, e := range dl.Outbox {
		if in(e.CreatedAt) {
			d.Outbox = append(d.Outbox, e)
		}
	}
	c.render(w, http.StatusOK, v, deadPage(v, d))
}

func (c *Console) deadInbox(ctx context.Context, w http.ResponseWriter, r *http.Request, s session) {
	stream := r.PathValue("stream")
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		c.refuse(w, r, http.StatusBadRequest, "not a message id")
		return
	}
	d, err := c.adm.DeadInbox(ctx, stream, id)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	b, size, err := c.adm.Payload(ctx, stream, id, payloadLimit)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	text := string(b)
	binary := !utf8.Valid(b)
	if binary {
		text = strings.ToValidUTF8(text, "\uFFFD")
	}
	// What the message changed: the flight versions it made and their
	// events (none where no pipeline answers the query).
	eff, err := c.messageEffects(ctx, stream, id)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	v := c.view(s)
	c.render(w, http.StatusOK, v, messagePage(v, messageView{D: d, Payload: text, Size: size, Shown: len(b), NotUTF8: binary,
		Effects: eff, Now: c.clk.Now()}))
}

func (c *Console) deadOutbox(ctx context.Context, w http.ResponseWriter, r *http.Request, s session) {
	e, err := c.adm.DeadOutbox(ctx, r.PathValue("event"))
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	v := c.view(s)
	c.render(w, http.StatusOK, v, eventPage(v, e))
}

// replayRequest reads a replay's selection from a query or form.
func replayRequest(v url.Values) admin.ReplayRequest {
	req := admin.ReplayRequest{Source: v.Get("source"), Stream: v.Get("stream"), Class: strings.ToUpper(v.Get("class")),
		Target: v.Get("target"), Reason: strings.TrimSpace(v.Get("reason")), Limit: replayLimit}
	for _, f := range v["ids"] {
		req.IDs = append(req.IDs, strings.FieldsFunc(f, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' })...)
	}
	if req.Source == "" {
		req.Source = "inbox"
	}
	return req
}

func (c *Console) replayForm(_ context.Context, w http.ResponseWriter, r *http.Request, s session) {
	req := replayRequest(r.URL.Query())
	v := c.view(s)
	c.render(w, http.StatusOK, v, replayPage(v, replayView{R: req, Streams: c.adm.StreamNames(), Targets: c.adm.TargetNames()}))
}

func (c *Console) replayPreview(w http.ResponseWriter, r *http.Request, s session) {
	req := replayRequest(r.PostForm)
	req.DryRun = true
	ctx, cancel := context.WithTimeout(r.Context(), c.timeout)
	defer cancel()
	res, err := c.adm.Replay(ctx, s.actor(), req)
	v := c.view(s)
	if err != nil {
		status, msg := c.adm.PublicError(r, err)
		c.render(w, status, v, replayPage(v, replayView{R: req, Error: msg, Streams: c.adm.StreamNames(), Targets: c.adm.TargetNames()}))
		return
	}
	c.render(w, http.StatusOK, v, resultPage(v, resultView{R: req, Res: res}))
}

func (c *Console) replayRun(w http.ResponseWriter, r *http.Request, s session) {
	req := replayRequest(r.PostForm)
	// The confirmation replays exactly the ids the dry run showed.
	req.Class, req.Target = "", ""
	if len(req.IDs) == 0 {
		c.refuse(w, r, http.StatusBadRequest, "nothing selected to replay: run the dry run first")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), c.timeout)
	defer cancel()
	res, err := c.adm.Replay(ctx, s.actor(), req)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	v := c.view(s)
	c.render(w, http.StatusOK, v, resultPage(v, resultView{R: req, Res: res, Done: true}))
}

// terminal tells whether a replayed message or event is settled.
func terminal(status string) bool {
	switch status {
	case "PENDING", "FAILED":
		return false
	}
	return true
}

func (c *Console) progress(ctx context.Context, w http.ResponseWriter, r *http.Request, _ session) {
	q := r.URL.Query()
	ids := strings.FieldsFunc(q.Get("ids"), func(r rune) bool { return r == ',' })
	if len(ids) > replayLimit {
		ids = ids[:replayLimit]
	}
	st, err := c.adm.Progress(ctx, q.Get("source"), q.Get("stream"), ids)
	if err != nil {
		c.failText(w, r, err)
		return
	}
	counts := map[string]int{}
	done := true
	for _, v := range st {
		counts[v]++
		done = done && terminal(v)
	}
	if done {
		w.Header().Set("X-Console-Done", "1")
	}
	c.write(w, http.StatusOK, "progress", progressBody(progressView{Counts: counts, Total: len(ids), Settled: done}))
}

// noAnswer is why a page built on a registered query has no answer: the
// query is not served here (its pipeline is not enabled), or it failed.
type noAnswer struct{ Unavailable, Error string }

// noAnswerOf sorts a registered query's error: one not served here (501) is
// shown as unavailable, on a page that answers 200; any other as the page's
// error, with its status.
func (c *Console) noAnswerOf(r *http.Request, err error) (int, noAnswer) {
	if admin.ErrorStatus(err) == http.StatusNotImplemented {
		return http.StatusOK, noAnswer{Unavailable: err.Error()}
	}
	status, msg := c.adm.PublicError(r, err)
	return status, noAnswer{Error: msg}
}

// requests shows the answer of the registered query "requests".
func (c *Console) requests(ctx context.Context, w http.ResponseWriter, r *http.Request, s session) {
	q := r.URL.Query()
	d := requestsView{Status: q.Get("status")}
	ans, err := c.adm.Query(ctx, "requests", q)
	status := http.StatusOK
	if err != nil {
		status, d.noAnswer = c.noAnswerOf(r, err)
	} else {
		t := asTable(ans)
		d.Table = &t
	}
	c.render(w, status, c.view(s), requestsPage(d))
}

func (c *Console) gaps(ctx context.Context, w http.ResponseWriter, r *http.Request, s session) {
	gs, err := c.adm.Gaps(ctx, 200)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	st, err := c.adm.Status(ctx)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.render(w, http.StatusOK, c.view(s), gapsPage(gapsView{Streams: st.Streams, Gaps: gs}))
}
