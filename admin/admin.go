// Package admin is the operators' HTTP API of a running msgx service: status
// of streams and relay targets, dead letters, audited replays (previewed by a
// dry run first), backfill status and the queries pipelines register, plus
// /metrics, /healthz and /readyz. Requests carry a bearer token compared in
// constant time; the read-only scope sees, the operator scope also acts.
package admin

import (
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/msgx/msgx/inbox"
	"github.com/msgx/msgx/internal/clock"
	"github.com/msgx/msgx/outbox"
	"github.com/msgx/msgx/store"
)

//go:embed sql
var sqlFS embed.FS

var queries = store.MustLoadQuerySet("admin", sqlFS, "sql")

// Scope is what a token may do.
type Scope int

// Scopes; Operator includes Read.
const (
	Anonymous Scope = iota
	Read
	Operator
)

func (s Scope) String() string {
	switch s {
	case Read:
		return "read"
	case Operator:
		return "operator"
	}
	return "anonymous"
}

// Stream is an inbox stream the API reports on and replays.
type Stream struct {
	Name string
	// Engine replays (and wakes the pump); nil when the stream runs elsewhere.
	Engine *inbox.Engine
	// Overdue is the stream's overdue-backfill limit.
	Overdue time.Duration
	// LastSuccess is when this process last committed a message of the stream.
	LastSuccess func() time.Time
	// Mailbox reports since when (host clock) this process has failed to
	// read the stream's mailbox, and why; nil without a poller here.
	Mailbox func() (since time.Time, err error)
}

// Check is one readiness check.
type Check struct {
	Name  string
	Check func(ctx context.Context) error
}

// QueryFunc answers a registered query (/v1/requests, /v1/flights). It
// refuses a parameter it does not know or cannot read with an error
// wrapping ErrBadParameter, which the API answers with 400 and the error's
// text; any other error is the service's fault (500).
type QueryFunc func(ctx context.Context, params map[string][]string) (any, error)

// ErrBadParameter marks a refusal of a request's parameters.
var ErrBadParameter = errors.New("bad parameter")

// Config is what the API serves.
type Config struct {
	DB      *store.DB
	Streams []Stream
	// Targets are the relay's targets; Lag measures their lag (relay.Lag).
	Targets []string
	Lag     func(ctx context.Context) (map[string]time.Duration, error)
	// TargetStates tells, per target, whether this process's relay has it
	// paused (its broker unavailable) and its last send error
	// (relay.Targets).
	TargetStates func() []outbox.TargetState
	// Tokens; with neither set every request is let through (the embedded
	// profile on a loopback listener).
	ReadToken, OperatorToken string
	Gatherer                 prometheus.Gatherer
	Checks                   []Check
	// Queries by name ("requests", "flights", "flight-history",
	// "message-effects"); a missing one answers 501.
	Queries map[string]QueryFunc
	// Unavailable explains a missing query (default "not available").
	Unavailable map[string]string
	// Clock stamps audit rows and replays and, when set, is the "now" ages
	// are measured from (default: ages from the database's clock, shared by
	// every instance; the wall clock for the rest).
	Clock clock.Clock
	// HostClock is this host's clock, used for what Clock does when Clock
	// is not set (ages still come from the database's clock); default the
	// wall clock.
	HostClock clock.Clock
	Logger    *slog.Logger
	// Timeout bounds each request's database work (default 30 s).
	Timeout time.Duration
}

// Server is the admin HTTP handler.
type Server struct {
	cfg     Config
	q       store.Queries
	mux     *http.ServeMux
	streams map[string]Stream
	dbClock bool
}

// now is the time ages are measured from.
func (s *Server) now(ctx context.Context) (time.Time, error) {
	if !s.dbClock {
		return s.cfg.Clock.Now(), nil
	}
	var t time.Time
	if err := s.cfg.DB.QueryRow(ctx, s.q.Get("Now")).Scan(&t); err != nil {
		return t, fmt.Errorf("admin: database clock: %w", err)
	}
	return t, nil
}

// New returns the handler.
func New(cfg Config) (*Server, error) {
	if cfg.DB == nil {
		return nil, errors.New("admin: no database")
	}
	dbClock := cfg.Clock == nil
	if dbClock {
		cfg.Clock = cfg.HostClock
		if cfg.Clock == nil {
			cfg.Clock = clock.Real{}
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	q, err := queries.For(cfg.DB.Dialect())
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, q: q, mux: http.NewServeMux(), streams: map[string]Stream{}, dbClock: dbClock}
	for _, st := range cfg.Streams {
		s.streams[st.Name] = st
	}
	if cfg.Gatherer != nil {
		s.mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{}))
	}
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, map[string]string{"status": "ok"}) })
	s.mux.HandleFunc("GET /readyz", s.readyz)
	s.route("GET /v1/status", Read, s.status)
	s.route("GET /v1/dead", Read, s.deadList)
	s.route("GET /v1/dead/inbox/{stream}/{id}", Read, s.deadInbox)
	s.route("GET /v1/dead/outbox/{event}", Read, s.deadOutbox)
	s.route("POST /v1/replay", Operator, s.replay)
	s.route("GET /v1/backfill", Read, s.backfill)
	s.route("GET /v1/requests", Read, s.query("requests"))
	s.route("GET /v1/flights", Read, s.query("flights"))
	s.route("GET /v1/flights/{flid}/history", Read, s.pathQuery("flight-history", "flid"))
	s.route("GET /v1/messages/{stream}/{id}/effects", Read, s.pathQuery("message-effects", "stream", "id"))
	// The path the SIS integrators know from the system msgx replaces.
	s.route("GET /all/flights", Read, s.query("flights"))
	return s, nil
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Problem is the body of every error answer.
type Problem struct {
	Error string `json:"error"`
}

type handler func(ctx context.Context, r *http.Request, actor string) (any, error)

// httpError is an error with the status to answer.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func errorf(status int, format string, args ...any) error {
	return &httpError{status: status, msg: fmt.Sprintf(format, args...)}
}

func (s *Server) route(pattern string, need Scope, h handler) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		scope := s.scope(r)
		if scope < need {
			if scope == Anonymous {
				w.Header().Set("WWW-Authenticate", `Bearer realm="msgx"`)
				writeJSON(w, http.StatusUnauthorized, Problem{"missing or unknown bearer token"})
			} else {
				writeJSON(w, http.StatusForbidden, Problem{fmt.Sprintf("the %s scope may not do this; it needs the %s scope", scope, need)})
			}
			return
		}
		actor := scope.String()
		if who := strings.TrimSpace(r.Header.Get("X-Msgx-Actor")); who != "" && len(who) <= 100 {
			actor = who + " (" + actor + " token)"
		}
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
		defer cancel()
		out, err := h(ctx, r, actor)
		if err != nil {
			if status := ErrorStatus(err); status != http.StatusInternalServerError {
				writeJSON(w, status, Problem{err.Error()})
				return
			}
			s.cfg.Logger.Error("admin: request failed", "path", r.URL.Path, "err", err)
			writeJSON(w, http.StatusInternalServerError, Problem{err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, out)
	})
}

// scope compares the bearer token with both tokens in constant time.
func (s *Server) scope(r *http.Request) Scope {
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return s.TokenScope(tok)
}

// TokenScope is the scope of a token, compared with both tokens in constant
// time; with no token configured every caller is an operator.
func (s *Server) TokenScope(tok string) Scope {
	if s.OpenAccess() {
		return Operator
	}
	if tok == "" {
		return Anonymous
	}
	op := s.cfg.OperatorToken != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.OperatorToken)) == 1
	rd := s.cfg.ReadToken != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.ReadToken)) == 1
	switch {
	case op:
		return Operator
	case rd:
		return Read
	}
	return Anonymous
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// CheckResult is one readiness check's outcome.
type CheckResult struct {
	Name  string `json:"name"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	res, ok := s.runChecks(ctx)
	status := http.StatusOK
	if !ok {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, map[string]any{"ready": ok, "checks": res})
}

// OpenAccess tells whether no token is configured (every caller acts).
func (s *Server) OpenAccess() bool { return s.cfg.ReadToken == "" && s.cfg.OperatorToken == "" }

// Ready runs the readiness checks.
func (s *Server) Ready(ctx context.Context) ([]CheckResult, bool) { return s.runChecks(ctx) }

// runChecks runs every check at once, so that a slow one costs the others
// nothing; a check still running when ctx ends fails as unanswered.
func (s *Server) runChecks(ctx context.Context) ([]CheckResult, bool) {
	all := append([]Check{{Name: "database", Check: s.cfg.DB.Ping}}, s.cfg.Checks...)
	type result struct {
		i   int
		err error
	}
	results := make(chan result, len(all))
	for i, c := range all {
		go func() { results <- result{i, c.Check(ctx)} }()
	}
	res := make([]CheckResult, len(all))
	answered := make([]bool, len(all))
	take := func(r result) {
		answered[r.i] = true
		res[r.i] = CheckResult{Name: all[r.i].Name, OK: r.err == nil}
		if r.err != nil {
			res[r.i].Error = r.err.Error()
		}
	}
wait:
	for range all {
		select {
		case r := <-results:
			take(r)
		case <-ctx.Done():
			break wait
		}
	}
	for more := true; more; {
		select {
		case r := <-results:
			take(r)
		default:
			more = false
		}
	}
	ok := true
	for i := range all {
		if !answered[i] {
			res[i] = CheckResult{Name: all[i].Name, Error: "no answer within the readiness bound: " + ctx.Err().Error()}
		}
		ok = ok && res[i].OK
	}
	return res, ok
}

func (s *Server) query(name string) handler {
	return func(ctx context.Context, r *http.Request, _ string) (any, error) {
		return s.Query(ctx, name, r.URL.Query())
	}
}

// Query answers a registered query; a missing one is an error whose
// ErrorStatus is 501 (Not Implemented) and whose text says why.
func (s *Server) Query(ctx context.Context, name string, params map[string][]string) (any, error) {
	f := s.cfg.Queries[name]
	if f == nil {
		why := s.cfg.Unavailable[name]
		if why == "" {
			why = "not available in this build"
		}
		return nil, errorf(http.StatusNotImplemented, "%s", why)
	}
	if err := readableParams(params); err != nil {
		return nil, err
	}
	return f(ctx, params)
}

// readableParams refuses parameter names and values that no query can
// mean and that the database would refuse with its own error: text that is
// not UTF-8, NUL and other control characters, and values longer than any
// parameter of a query needs.
func readableParams(params map[string][]string) error {
	for name, values := range params {
		if err := readable(name); err != nil {
			return fmt.Errorf("%w: a parameter name %w", ErrBadParameter, err)
		}
		for _, v := range values {
			if err := readable(v); err != nil {
				return fmt.Errorf("%w: %s: %w", ErrBadParameter, name, err)
			}
		}
	}
	return nil
}

func readable(s string) error {
	switch {
	case len(s) > maxParamBytes:
		return fmt.Errorf("is longer than %d bytes", maxParamBytes)
	case !utf8.ValidString(s):
		return errors.New("is not UTF-8")
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return errors.New("holds a control character (NUL, a line break, …)")
	}
	return nil
}

// maxParamBytes bounds a query parameter: a list of FLIDs fits, a pasted
// file does not.
const maxParamBytes = 16 << 10

// ErrorStatus is the HTTP status the API answers an error with: the status
// of a refusal (400, 404, 409, 501...), 400 for ErrBadParameter, or 500.
func ErrorStatus(err error) int {
	var he *httpError
	switch {
	case errors.As(err, &he):
		return he.status
	case errors.Is(err, ErrBadParameter):
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

// RequireOperator guards a handler (a pipeline's) with the operator scope.
func (s *Server) RequireOperator(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch scope := s.scope(r); {
		case scope == Anonymous:
			w.Header().Set("WWW-Authenticate", `Bearer realm="msgx"`)
			writeJSON(w, http.StatusUnauthorized, Problem{"missing or unknown bearer token"})
		case scope < Operator:
			writeJSON(w, http.StatusForbidden, Problem{"this needs the operator scope"})
		default:
			h.ServeHTTP(w, r)
		}
	})
}
