// Package console is the operators' web console of a running msgx service:
// server-rendered pages over the admin API's own functions (status, dead
// letters, audited replays, registered queries, mailbox gaps), served on the
// admin listener under /console/. A login form takes an admin token and
// sets an HttpOnly, SameSite=Strict cookie holding an HMAC-signed session,
// which the server also keeps until logout or idleness; every form carries
// a CSRF token and must come from the console's own site; the read-only
// scope sees no action and is refused on POST. Failed logins are throttled
// per client by the admin server. The pages are built in Go (gomponents,
// escaping every value) and the assets are embedded: no build step, no CDN.
package console

import (
	"context"
	"crypto/rand"
	"embed"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgx/msgx/admin"
	"github.com/msgx/msgx/clock"
)

// Prefix is where the console is mounted.
const Prefix = "/console/"

//go:embed static
var staticFS embed.FS

// Console is the console's HTTP handler.
type Console struct {
	adm     *admin.Server
	log     *slog.Logger
	clk     clock.Clock
	key     []byte
	ttl     time.Duration
	idle    time.Duration
	live    *sessions
	timeout time.Duration
	mux     *http.ServeMux
	hist    *history
	every   time.Duration
	gather  prometheus.Gatherer
}

// Option configures New.
type Option func(*Console)

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(c *Console) { c.log = l } }

// WithClock sets the clock of sessions and samples (default the wall clock).
func WithClock(clk clock.Clock) Option { return func(c *Console) { c.clk = clk } }

// WithSessionTTL sets how long a login lasts (default 12 h, a night shift).
func WithSessionTTL(d time.Duration) Option { return func(c *Console) { c.ttl = d } }

// WithSessionIdle sets after how long without a page loaded a session ends
// (default 30 min). The overview's automatic refreshes do not count.
func WithSessionIdle(d time.Duration) Option { return func(c *Console) { c.idle = d } }

// WithMaxSessions bounds the live sessions (default 1000); a login beyond
// it is refused until one ends.
func WithMaxSessions(n int) Option { return func(c *Console) { c.live.max = n } }

// WithGatherer sets where the throughput charts read the services' counters
// (msgx_inbox_settled_total, msgx_outbox_published_total); without it the
// charts show head age only.
func WithGatherer(g prometheus.Gatherer) Option { return func(c *Console) { c.gather = g } }

// WithSampleEvery sets the interval of the charts' samples (default 1 min;
// the charts keep the last 60).
func WithSampleEvery(d time.Duration) Option { return func(c *Console) { c.every = d } }

// New returns the console over an admin server. Its session key is random:
// sessions end when the process restarts (log in again).
func New(adm *admin.Server, opts ...Option) (*Console, error) {
	c := &Console{adm: adm, log: slog.Default(), clk: clock.Real{}, ttl: 12 * time.Hour, idle: 30 * time.Minute,
		live: &sessions{last: map[string]time.Time{}, max: 1000}, timeout: 30 * time.Second, every: time.Minute}
	for _, o := range opts {
		o(c)
	}
	c.key = make([]byte, 32)
	if _, err := rand.Read(c.key); err != nil {
		return nil, err
	}
	c.hist = newHistory(60)
	static, _ := fs.Sub(staticFS, "static")
	c.mux = http.NewServeMux()
	c.mux.Handle("GET "+Prefix+"static/", http.StripPrefix(Prefix+"static/", noListing(http.FileServerFS(static))))
	c.mux.HandleFunc("GET "+Prefix+"login", c.loginForm)
	c.mux.HandleFunc("POST "+Prefix+"login", c.login)
	c.mux.HandleFunc("GET "+Prefix+"{$}", c.page(c.overview))
	c.mux.HandleFunc("GET "+Prefix+"fragment/overview", c.page(c.overviewFragment))
	c.mux.HandleFunc("GET "+Prefix+"dead", c.page(c.deadList))
	c.mux.HandleFunc("GET "+Prefix+"dead/inbox/{stream}/{id}", c.page(c.deadInbox))
	c.mux.HandleFunc("GET "+Prefix+"dead/outbox/{event}", c.page(c.deadOutbox))
	c.mux.HandleFunc("GET "+Prefix+"replay", c.page(c.replayForm))
	c.mux.HandleFunc("POST "+Prefix+"replay/preview", c.action(c.replayPreview))
	c.mux.HandleFunc("POST "+Prefix+"replay/run", c.action(c.replayRun))
	c.mux.HandleFunc("GET "+Prefix+"fragment/progress", c.page(c.progress))
	c.mux.HandleFunc("GET "+Prefix+"flights", c.page(c.flights))
	c.mux.HandleFunc("GET "+Prefix+"flights/{flid}", c.page(c.flight))
	c.mux.HandleFunc("GET "+Prefix+"flights/{flid}/json", c.page(c.flightJSON))
	c.mux.HandleFunc("GET "+Prefix+"flights/{flid}/history", c.page(c.flightHistory))
	c.mux.HandleFunc("GET "+Prefix+"messages/{stream}/{id}", c.page(c.deadInbox))
	c.mux.HandleFunc("GET "+Prefix+"requests", c.page(c.requests))
	c.mux.HandleFunc("GET "+Prefix+"gaps", c.page(c.gaps))
	c.mux.HandleFunc("POST "+Prefix+"logout", c.action(c.logout))
	return c, nil
}

// noListing answers 404 for a directory: the assets are files, and a
// listing tells nothing an operator needs.
func noListing(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "" || strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// ServeHTTP serves the console to the requests the admin server's Admit
// lets in (the listener's Host names, loopback only without tokens).
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !c.adm.Admit(w, r) {
		return
	}
	h := w.Header()
	// Payloads are hostile: even if markup slipped through, no inline or
	// foreign script runs.
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	// frame-ancestors for the browsers that read the CSP, this for the others.
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	c.mux.ServeHTTP(w, r)
}

type pageFunc func(ctx context.Context, w http.ResponseWriter, r *http.Request, s session)

// page serves a GET: to the login form without a session (fragments,
// fetched by script, answer 401 instead).
func (c *Console) page(f pageFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, ok := c.session(r)
		if !ok {
			if r.Header.Get("X-Console-Fragment") != "" {
				http.Error(w, "log in again", http.StatusUnauthorized)
				return
			}
			http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), c.timeout)
		defer cancel()
		f(ctx, w, r, s)
	}
}

// action serves a POST: from the console's own site, with a session of the
// operator scope and the session's CSRF token.
func (c *Console) action(f func(w http.ResponseWriter, r *http.Request, s session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
		s, ok := c.session(r)
		switch {
		case !admin.SameSite(r):
			c.adm.Refused(r, admin.RefusedCrossSite, "a console form posted from another site")
			c.refuse(w, r, http.StatusForbidden, "this form did not come from the console's own page")
		case !ok:
			c.refuse(w, r, http.StatusUnauthorized, "you are not logged in (or the session expired): log in again")
		case !c.checkCSRF(r, s):
			c.adm.Refused(r, admin.RefusedCSRF, "a console POST with a missing or wrong CSRF token")
			c.refuse(w, r, http.StatusForbidden, "this form is stale or did not come from the console (CSRF token missing or wrong): reload the page and try again")
		case s.Scope < admin.Operator && r.URL.Path != Prefix+"logout":
			c.log.Warn("console: POST refused: read-only scope", "path", r.URL.Path, "remote", r.RemoteAddr)
			c.refuse(w, r, http.StatusForbidden, "the read scope may only look; this needs the operator token")
		default:
			f(w, r, s)
		}
	}
}

// refuse renders an error page.
func (c *Console) refuse(w http.ResponseWriter, r *http.Request, status int, msg string) {
	s, _ := c.session(r)
	v := c.view(s)
	c.render(w, status, v, errorPage(v, http.StatusText(status), msg))
}
