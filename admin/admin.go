// Package admin is the operators' HTTP API of a running msgx service: status
// of streams and relay targets, dead letters, audited replays (previewed by a
// dry run first), backfill status and the queries pipelines register, plus
// /metrics, /healthz and /readyz. Requests carry a named bearer token
// compared in constant time; the read-only scope sees, the operator scope
// also acts, and the audit records the token's name. Failed authentications
// are throttled per client address, logged and counted; a request whose Host
// is not a name of the listener, an API write that is not JSON or comes from
// another site, and (without tokens) a client not on loopback are refused
// before anything is served; a failure of the service answers a reference to
// its log line, never the database's text.
package admin

import (
	"context"
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

	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/inbox"
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
	// WAL reports the WAL relay's slot (outbox.mode wal; nil otherwise).
	WAL func() outbox.WALStatus
	// Tokens are the named credentials. ReadToken and OperatorToken are
	// shorthands for the tokens named "read" and "operator". With no token at
	// all every request is let through as the open-access operator, from
	// loopback clients only unless OpenNetwork (the embedded profile).
	Tokens                   []Token
	ReadToken, OperatorToken string
	// OpenNetwork lets the open access (no token) serve clients that are not
	// on loopback: anyone who reaches the listener can replay.
	OpenNetwork bool
	// Hosts are the names of the listener a request's Host may carry beside
	// an IP address and localhost (a DNS-rebinding page carries its own).
	Hosts []string
	// Throttle slows clients down whose authentications fail (default
	// DefaultThrottle).
	Throttle Throttle
	// ReadyCache is how long a /readyz answer is reused (default 1 s): the
	// checks reach the database, the mailboxes and the brokers, and
	// /readyz needs no token.
	ReadyCache time.Duration
	Gatherer   prometheus.Gatherer
	Checks     []Check
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
	mux     *routeMux
	streams map[string]Stream
	dbClock bool

	tokens   []Token
	hosts    map[string]bool
	throttle *throttle
	ready    readyCache

	authFailures, refused *prometheus.CounterVec
	evicted               prometheus.Counter
}

// now is the time ages are measured from.
func (s *Server) now(ctx context.Context) (time.Time, error) {
	if !s.dbClock {
		return s.cfg.Clock.Now(), nil
	}
	t, err := store.Now(ctx, s.cfg.DB)
	if err != nil {
		return t, fmt.Errorf("admin: %w", err)
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
	if cfg.ReadyCache <= 0 {
		cfg.ReadyCache = time.Second
	}
	q, err := queries.For(cfg.DB.Dialect())
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, q: q, mux: newRouteMux(), streams: map[string]Stream{}, dbClock: dbClock, hosts: map[string]bool{}}
	if err := s.setTokens(); err != nil {
		return nil, err
	}
	for _, h := range cfg.Hosts {
		s.hosts[hostName(h)] = true
	}
	s.authFailures, s.refused, s.evicted = newSecurityMetrics()
	hostClk := cfg.HostClock
	if hostClk == nil {
		hostClk = clock.Real{}
	}
	s.throttle = newThrottle(cfg.Throttle, hostClk, func(client string) {
		s.evicted.Inc()
		s.cfg.Logger.Warn("admin: the authentication throttle's table is full: the oldest client's failures are forgotten", "client", client)
	})
	s.ready.clk = hostClk
	for _, st := range cfg.Streams {
		s.streams[st.Name] = st
	}
	if cfg.Gatherer != nil {
		s.mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{}))
	}
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, map[string]string{"status": "ok"}) })
	s.mux.HandleFunc("GET /readyz", s.readyz)
	s.mux.HandleFunc("GET /v1/openapi.json", s.openAPI)
	s.route("GET /v1/status", Read, s.status)
	s.route("GET /v1/dead", Read, s.deadList)
	s.route("GET /v1/dead/inbox/{stream}/{id}", Read, s.deadInbox)
	s.route("GET /v1/dead/outbox/{event}", Read, s.deadOutbox)
	s.route("POST /v1/replay", Operator, s.replay)
	s.route("POST /v1/skip", Operator, s.skip)
	s.route("GET /v1/backfill", Read, s.backfill)
	s.route("GET /v1/requests", Read, s.query("requests"))
	s.route("GET /v1/flights", Read, s.query("flights"))
	s.route("GET /v1/flights/{flid}/history", Read, s.pathQuery("flight-history", "flid"))
	s.route("GET /v1/messages/{stream}/{id}/effects", Read, s.pathQuery("message-effects", "stream", "id"))
	// The path the SIS integrators know from the system msgx replaces.
	s.route("GET /all/flights", Read, s.query("flights"))
	return s, nil
}

// setTokens gathers the named tokens and the two shorthands, refusing an
// empty name or secret, a scope that acts on nothing and a name or secret
// given twice.
func (s *Server) setTokens() error {
	all := append([]Token(nil), s.cfg.Tokens...)
	if s.cfg.ReadToken != "" {
		all = append(all, Token{Name: "read", Scope: Read, Secret: s.cfg.ReadToken})
	}
	if s.cfg.OperatorToken != "" {
		all = append(all, Token{Name: "operator", Scope: Operator, Secret: s.cfg.OperatorToken})
	}
	names, secrets := map[string]bool{}, map[string]bool{}
	for _, t := range all {
		switch {
		case t.Name == "" || t.Secret == "":
			return errors.New("admin: a token needs a name and a secret")
		case t.Scope != Read && t.Scope != Operator:
			return fmt.Errorf("admin: token %s: scope %s", t.Name, t.Scope)
		case names[t.Name]:
			return fmt.Errorf("admin: two tokens are named %s", t.Name)
		case secrets[t.Secret]:
			return fmt.Errorf("admin: token %s has the secret of another token", t.Name)
		}
		names[t.Name], secrets[t.Secret] = true, true
	}
	s.tokens = all
	return nil
}

// ServeHTTP serves the API to the requests Admit lets in.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.Admit(w, r) {
		s.mux.ServeHTTP(w, r)
	}
}

// Problem is the body of every error answer.
type Problem struct {
	Error string `json:"error"`
}

// handler serves an authorized request; actor is how the audit names its
// caller (Identity.Actor).
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
		if !s.checkWrite(w, r) {
			return
		}
		id, ok := s.authorize(w, r, need)
		if !ok {
			return
		}
		// X-Msgx-Actor (the CLI sends $USER) is only a note beside the
		// token's name: anyone holding the token can write anything there.
		actor := id.Actor("", r.Header.Get("X-Msgx-Actor"))
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
		defer cancel()
		out, err := h(ctx, r, actor)
		if err != nil {
			status, msg := s.PublicError(r, err)
			writeJSON(w, status, Problem{msg})
			return
		}
		writeJSON(w, http.StatusOK, out)
	})
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

// readyz answers from the checks of the last ReadyCache; a failed check's
// error text goes to authenticated callers only (it may name hosts,
// tables and accounts), the others see which check failed.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	res, ok := s.Ready(r.Context())
	status := http.StatusOK
	if !ok {
		status = http.StatusServiceUnavailable
	}
	if !ok && !s.detailed(r) {
		shown := make([]CheckResult, len(res))
		for i, c := range res {
			shown[i] = CheckResult{Name: c.Name, OK: c.OK}
			if !c.OK {
				shown[i].Error = "failed (its error is shown to authenticated callers)"
			}
		}
		res = shown
	}
	writeJSON(w, status, map[string]any{"ready": ok, "checks": res})
}

// detailed tells whether a /readyz caller may see errors: with a valid token
// (a wrong one counts as a failed authentication, as anywhere else).
func (s *Server) detailed(r *http.Request) bool {
	if s.OpenAccess() {
		return true
	}
	tok := bearer(r)
	if tok == "" {
		return false
	}
	_, err := s.Authenticate(r, tok, "api")
	return err == nil
}

// OpenAccess tells whether no token is configured (every caller acts).
func (s *Server) OpenAccess() bool { return len(s.tokens) == 0 }

// Ready runs the readiness checks, or answers what they answered less than
// Config.ReadyCache ago; callers at the same time share one run, bounded by
// 5 s.
func (s *Server) Ready(ctx context.Context) ([]CheckResult, bool) {
	return s.ready.get(ctx, s.cfg.ReadyCache, func() ([]CheckResult, bool) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return s.runChecks(ctx)
	})
}

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

// RequireOperator guards a handler (a pipeline's) as the API's own: the
// listener's Host and open-access rules, JSON from the same site for a
// write, and the operator scope.
func (s *Server) RequireOperator(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.Admit(w, r) || !s.checkWrite(w, r) {
			return
		}
		if _, ok := s.authorize(w, r, Operator); ok {
			h.ServeHTTP(w, r)
		}
	})
}
