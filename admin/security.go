package admin

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Token is a named credential of a scope. Its name is who the audit
// records: a person or a system, so that every token is its own name.
type Token struct {
	Name   string
	Scope  Scope
	Secret string
}

// Identity is whom a request authenticated as.
type Identity struct {
	// Name is the token's name; OpenAccessName without tokens.
	Name  string
	Scope Scope
}

// OpenAccessName is the identity of every caller when no token is
// configured (loopback clients only, unless Config.OpenNetwork).
const OpenAccessName = "open access"

// Actor is how the audit names what this identity does: the token's name
// and scope, then the caller's own note (X-Msgx-Actor, the console's name
// field), quoted, which is never taken for the actor.
func (id Identity) Actor(via, note string) string {
	a := id.Name + " (" + id.Scope.String() + " token"
	if id.Name == OpenAccessName {
		a = id.Name + " (no token"
	}
	if via != "" {
		a += ", " + via
	}
	if note = cleanNote(note); note != "" {
		a += "; note " + strconv.Quote(note)
	}
	return a + ")"
}

// cleanNote keeps a caller's note short and printable: it is a hint beside
// the token's name, not an identity.
func cleanNote(s string) string {
	s = strings.TrimSpace(strings.ToValidUTF8(s, "?"))
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, s)
	if r := []rune(s); len(r) > 60 {
		s = string(r[:60])
	}
	return s
}

// Reasons of msgx_admin_auth_failures_total.
const (
	authMissing   = "missing_token"
	authUnknown   = "unknown_token"
	authThrottled = "throttled"
	authScope     = "insufficient_scope"
)

// ErrUnknownToken is a missing or unknown token.
var ErrUnknownToken = errors.New("missing or unknown token")

// ThrottledError refuses a client that failed authentication too often: it
// may try again after RetryAfter.
type ThrottledError struct{ RetryAfter time.Duration }

func (e *ThrottledError) Error() string {
	return fmt.Sprintf("too many failed authentications from this address: try again in %s", e.RetryAfter.Round(time.Second))
}

// RetryAfterSeconds is e's Retry-After header value (whole seconds, at least 1).
func (e *ThrottledError) RetryAfterSeconds() string {
	return strconv.Itoa(max(1, int(math.Ceil(e.RetryAfter.Seconds()))))
}

// identify finds the token's identity, comparing it with every configured
// token in constant time (all of them, so the time tells nothing of which).
func (s *Server) identify(tok string) (Identity, bool) {
	var found Identity
	ok := false
	for _, t := range s.tokens {
		if subtle.ConstantTimeCompare([]byte(tok), []byte(t.Secret)) == 1 {
			found, ok = Identity{Name: t.Name, Scope: t.Scope}, true
		}
	}
	return found, ok && tok != ""
}

// Authenticate checks a token a client presents (via "api" or "console"):
// a throttled client is refused before its token is looked at
// (*ThrottledError), and an unknown token is ErrUnknownToken, counted in
// msgx_admin_auth_failures_total, logged (never the token) and held
// against the client's address. Without tokens configured every caller is
// the open-access operator.
func (s *Server) Authenticate(r *http.Request, tok, via string) (Identity, error) {
	if s.OpenAccess() {
		return Identity{Name: OpenAccessName, Scope: Operator}, nil
	}
	client := clientKey(r)
	if wait := s.throttle.wait(client); wait > 0 {
		s.authFailures.WithLabelValues(via, authThrottled).Inc()
		s.cfg.Logger.Warn("admin: authentication refused: the client is throttled", "via", via, "remote", r.RemoteAddr,
			"path", r.URL.Path, "retry_after", wait.Round(time.Millisecond))
		return Identity{}, &ThrottledError{RetryAfter: wait}
	}
	if tok == "" {
		s.authFailures.WithLabelValues(via, authMissing).Inc()
		s.cfg.Logger.Info("admin: authentication failed: no token", "via", via, "remote", r.RemoteAddr, "path", r.URL.Path)
		return Identity{}, ErrUnknownToken
	}
	id, ok := s.identify(tok)
	if !ok {
		failures, lock := s.throttle.fail(client)
		s.authFailures.WithLabelValues(via, authUnknown).Inc()
		s.cfg.Logger.Warn("admin: authentication failed: unknown token", "via", via, "remote", r.RemoteAddr, "path", r.URL.Path,
			"failures", failures, "locked_for", lock)
		return Identity{}, ErrUnknownToken
	}
	return id, nil
}

// bearer is the request's bearer token ("" without one).
func bearer(r *http.Request) string {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return ""
	}
	return strings.TrimSpace(tok)
}

// authorize authenticates an API request and checks its scope; when it
// fails, it has answered (401, 403 or 429).
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, need Scope) (Identity, bool) {
	id, err := s.Authenticate(r, bearer(r), "api")
	var te *ThrottledError
	switch {
	case errors.As(err, &te):
		w.Header().Set("Retry-After", te.RetryAfterSeconds())
		writeJSON(w, http.StatusTooManyRequests, Problem{te.Error()})
		return id, false
	case err != nil:
		w.Header().Set("WWW-Authenticate", `Bearer realm="msgx"`)
		writeJSON(w, http.StatusUnauthorized, Problem{"missing or unknown bearer token"})
		return id, false
	case id.Scope < need:
		s.authFailures.WithLabelValues("api", authScope).Inc()
		s.cfg.Logger.Warn("admin: request refused: insufficient scope", "token", id.Name, "scope", id.Scope.String(),
			"needs", need.String(), "remote", r.RemoteAddr, "path", r.URL.Path)
		writeJSON(w, http.StatusForbidden, Problem{fmt.Sprintf("the %s scope may not do this; it needs the %s scope", id.Scope, need)})
		return id, false
	}
	return id, true
}

// Reasons of msgx_admin_refused_total.
const (
	RefusedHost        = "host"
	RefusedOpenNetwork = "open_network"
	RefusedCrossSite   = "cross_site"
	RefusedContentType = "content_type"
	RefusedCSRF        = "csrf"
	RefusedSessions    = "sessions_full"
)

// Refused counts and logs a request refused before it was served (reason
// is one of the Refused constants).
func (s *Server) Refused(r *http.Request, reason, why string) {
	s.refused.WithLabelValues(reason).Inc()
	s.cfg.Logger.Warn("admin: request refused: "+why, "reason", reason, "remote", r.RemoteAddr, "host", r.Host,
		"method", r.Method, "path", r.URL.Path)
}

// Admit decides whether the admin listener serves a request at all, and
// answers it when not: its Host must be a name of the listener (an IP
// address, localhost or one of Config.Hosts), so that a page whose DNS name
// was rebound to this address cannot read it; and without tokens only a
// loopback client is served, unless Config.OpenNetwork says otherwise.
func (s *Server) Admit(w http.ResponseWriter, r *http.Request) bool {
	if host := hostName(r.Host); !s.knownHost(host) {
		s.Refused(r, RefusedHost, "the Host is not a name of this listener")
		writeJSON(w, http.StatusMisdirectedRequest, Problem{fmt.Sprintf("host %q is not a name of this listener (admin.hosts)", host)})
		return false
	}
	if s.OpenAccess() && !s.cfg.OpenNetwork && !loopbackClient(r) {
		s.Refused(r, RefusedOpenNetwork, "no token is configured and the client is not on loopback")
		writeJSON(w, http.StatusForbidden, Problem{"this admin listener has no token and serves loopback clients only: configure admin tokens"})
		return false
	}
	return true
}

func (s *Server) knownHost(host string) bool {
	return host == "localhost" || net.ParseIP(host) != nil || s.hosts[host]
}

// hostName is a Host header's name, without port, brackets or a final dot,
// in lower case.
func hostName(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(h, "]"), "["), ".")
	return strings.ToLower(h)
}

// loopbackClient tells whether the request comes from this host.
func loopbackClient(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// SameSite tells whether a request may act: a browser says where a request
// comes from (Sec-Fetch-Site; older ones at least Origin), and a write from
// another site is refused whatever its credentials. A client that is not a
// browser sends neither.
func SameSite(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		return site == "same-origin" || site == "none"
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		return err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host)
	}
	return true
}

// checkWrite refuses an API write from another site or whose body is not
// JSON: a page of any site can post a form (text/plain,
// application/x-www-form-urlencoded) without asking, but not JSON. When it
// refuses, it has answered.
func (s *Server) checkWrite(w http.ResponseWriter, r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return true
	}
	if !SameSite(r) {
		s.Refused(r, RefusedCrossSite, "a write from another site")
		writeJSON(w, http.StatusForbidden, Problem{"cross-site requests may not act on the admin API"})
		return false
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		s.Refused(r, RefusedContentType, "a write whose body is not JSON")
		writeJSON(w, http.StatusUnsupportedMediaType, Problem{"the body must be JSON (Content-Type: application/json)"})
		return false
	}
	return true
}

// clientKey is what throttling holds failures against: the client's IPv4
// address, or its IPv6 /64 (one host's usual share of addresses).
func clientKey(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	switch {
	case ip == nil:
		return host
	case ip.To4() != nil:
		return ip.To4().String()
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// internalError is the answer to a failure of the service: a reference to
// the log line that has the error, never the error's text (a database's
// message names tables, columns and values).
func (s *Server) internalError(r *http.Request, err error) string {
	ref := newRef()
	s.cfg.Logger.Error("admin: request failed", "path", r.URL.Path, "ref", ref, "err", err)
	return "internal error (ref " + ref + "): the service's log has the cause"
}

// PublicError is the status and the text a client may see for an error of
// the API's functions: a refusal's own text, or for a failure of the
// service a reference to the log line that holds the cause (logged here).
func (s *Server) PublicError(r *http.Request, err error) (int, string) {
	status := ErrorStatus(err)
	if status < 500 || status == http.StatusNotImplemented {
		return status, err.Error()
	}
	return status, s.internalError(r, err)
}

func newRef() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func newSecurityMetrics() (authFailures, refused *prometheus.CounterVec, evicted prometheus.Counter) {
	authFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "msgx_admin_auth_failures_total",
		Help: "Failed authentications on the admin listener, by channel (api, console) and reason (missing_token, unknown_token, throttled, insufficient_scope).",
	}, []string{"via", "reason"})
	refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "msgx_admin_refused_total",
		Help: "Requests the admin listener refused before serving them, by reason (host, open_network, cross_site, content_type, csrf, sessions_full).",
	}, []string{"reason"})
	// Every series exists from the start at 0, so that an alert's
	// increase() sees the first failure.
	for _, via := range []string{"api", "console"} {
		for _, reason := range []string{authMissing, authUnknown, authThrottled, authScope} {
			authFailures.WithLabelValues(via, reason)
		}
	}
	for _, reason := range []string{RefusedHost, RefusedOpenNetwork, RefusedCrossSite, RefusedContentType, RefusedCSRF, RefusedSessions} {
		refused.WithLabelValues(reason)
	}
	evicted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "msgx_admin_auth_throttle_evictions_total",
		Help: "Clients whose failed authentications were forgotten early because the throttle's table was full.",
	})
	return authFailures, refused, evicted
}
