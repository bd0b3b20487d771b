// Package httpserve runs the service's HTTP listeners (the ingress, the admin
// API and console) on a network that may be hostile: every server has read,
// write, idle and header limits; a request body must arrive at a minimum rate
// once a grace period is over (a client sending one byte every few seconds
// is cut off instead of holding a request slot for minutes); a client may
// hold only so many connections at once; and a stop closes the idle, the
// not yet started and the slow-body connections at once, waiting only for
// the requests that are being handled.
//
// A listener may serve TLS (a tls.Config, e.g. with a reloading
// certificate) or sit behind a TLS-terminating proxy: the proxies' addresses
// are then trusted for X-Forwarded-Proto and X-Forwarded-For, and only
// theirs. Secure and ClientAddr tell a handler what is known of a request.
package httpserve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgx/msgx/clock"
)

// Limits bound what one client can hold of a server.
type Limits struct {
	// ReadHeaderTimeout bounds the reading of a request's headers.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds the reading of a whole request, body included.
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from the end of its headers to the end
	// of its answer.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection left idle this long.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the request line and headers.
	MaxHeaderBytes int
	// MinBodyRate is the slowest a request body may arrive, in bytes per
	// second, once BodyGrace is over: a body is cut off (the request fails)
	// when fewer than MinBodyRate × (elapsed − BodyGrace) bytes have
	// arrived. 0 disables the check (ReadTimeout still bounds the body).
	MinBodyRate int64
	// BodyGrace is the time a body may take before the rate counts.
	BodyGrace time.Duration
	// MaxConnsPerClient is how many connections one client address may hold
	// at once; a further one is closed as soon as it is accepted. Trusted
	// proxies are not limited. 0: no limit.
	MaxConnsPerClient int
}

// DefaultLimits are production-safe limits for requests of up to a few
// megabytes: 10 s for the headers, 60 s for a request, 30 s to answer,
// 60 s idle, 64 KiB of headers, bodies at 1 KiB/s at least after 5 s, 16
// connections per client.
func DefaultLimits() Limits {
	return Limits{ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, WriteTimeout: 30 * time.Second,
		IdleTimeout: time.Minute, MaxHeaderBytes: 64 << 10, MinBodyRate: 1 << 10, BodyGrace: 5 * time.Second, MaxConnsPerClient: 16}
}

// Config is a server.
type Config struct {
	// Name names the listener in logs and metrics ("ingress", "admin").
	Name    string
	Handler http.Handler
	Limits  Limits
	// TLS serves HTTPS with this configuration (HTTP/1.1; its certificate
	// from Certificates or GetCertificate). Nil: plain HTTP.
	TLS *tls.Config
	// TrustedProxies are the addresses of the TLS-terminating proxies in
	// front of the listener: X-Forwarded-Proto and X-Forwarded-For are read
	// from these peers only.
	TrustedProxies []netip.Prefix
	Logger         *slog.Logger
	// Registerer receives the servers' metrics (default: none).
	Registerer prometheus.Registerer
	// Clock paces the log lines about refused and cut-off clients (default
	// the wall clock). Socket deadlines are on the wall clock regardless.
	Clock clock.Clock
}

// Server is a running HTTP server.
type Server struct {
	cfg  Config
	srv  *http.Server
	ln   net.Listener
	m    *metrics
	logs *Sampler

	mu       sync.Mutex
	conns    map[net.Conn]http.ConnState
	bodies   map[*rateBody]struct{}
	stopping bool
}

// New makes a server on ln; Serve serves it.
func New(ln net.Listener, cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	s := &Server{cfg: cfg, m: newMetrics(cfg.Registerer), logs: NewSampler(cfg.Clock, time.Minute),
		conns: map[net.Conn]http.ConnState{}, bodies: map[*rateBody]struct{}{}}
	l := cfg.Limits
	ln = &clientLimiter{Listener: ln, s: s, max: l.MaxConnsPerClient, held: map[netip.Addr]int{}}
	if cfg.TLS != nil {
		tc := cfg.TLS.Clone()
		// HTTP/1.1 only: the limits are per connection and per request, and
		// the legacy senders speak nothing else.
		tc.NextProtos = []string{"http/1.1"}
		ln = tls.NewListener(ln, tc)
	}
	s.ln = ln
	s.srv = &http.Server{
		Handler:           s.wrap(cfg.Handler),
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
		TLSNextProto:      map[string]func(*http.Server, *tls.Conn, http.Handler){},
		ConnState:         s.track,
		// The server's own complaints are about clients (bad TLS
		// handshakes, malformed requests): a scanner would fill the log.
		ErrorLog: slog.NewLogLogger(cfg.Logger.With("listener", cfg.Name).Handler(), slog.LevelDebug),
	}
	return s
}

// Addr is the listener's address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve serves until Shutdown or Close; it returns http.ErrServerClosed
// then.
func (s *Server) Serve() error { return s.srv.Serve(s.ln) }

// Shutdown stops the server: it closes the listener and, at once, the idle
// connections, those whose first request has not arrived yet and the
// requests still receiving their body (they fail, nothing of them was
// taken), then waits until the requests being handled are answered or ctx
// ends, when the rest is closed.
func (s *Server) Shutdown(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- s.srv.Shutdown(ctx) }()
	s.mu.Lock()
	s.stopping = true
	now := time.Now()
	for b := range s.bodies {
		// The read in progress fails at once; rateBody.Read refuses to go
		// on once the server is stopping.
		_ = b.rc.SetReadDeadline(now)
	}
	for c, st := range s.conns {
		if st == http.StateNew {
			_ = c.Close()
		}
	}
	s.mu.Unlock()
	err := <-done
	if err != nil {
		_ = s.srv.Close()
	}
	// Never served: the http.Server does not know the listener.
	_ = s.ln.Close()
	return err
}

// Close closes the listener and every connection at once.
func (s *Server) Close() error {
	err := s.srv.Close()
	_ = s.ln.Close()
	return err
}

func (s *Server) track(c net.Conn, st http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch st {
	case http.StateClosed, http.StateHijacked:
		delete(s.conns, c)
	case http.StateNew:
		if s.stopping {
			// Accepted as the stop began.
			_ = c.Close()
			return
		}
		s.conns[c] = st
	default:
		s.conns[c] = st
	}
	s.m.open.WithLabelValues(s.cfg.Name).Set(float64(len(s.conns)))
}

type ctxKey struct{}

// peer is what a listener knows of a request's origin.
type peer struct {
	secure bool
	client netip.Addr
}

func (s *Server) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := s.peerOf(r)
		r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, p))
		if s.cfg.Limits.MinBodyRate > 0 && r.Body != nil && r.Body != http.NoBody {
			b := &rateBody{ReadCloser: r.Body, s: s, rc: http.NewResponseController(w), start: time.Now(), client: p.client}
			if !s.addBody(b) {
				http.Error(w, "stopping", http.StatusServiceUnavailable)
				return
			}
			defer s.removeBody(b)
			r.Body = b
			// Also a handler that never reads the body is bounded: the
			// server reads (to discard) what it left before answering.
			b.extend()
			defer func() {
				if !b.done {
					// After the handler the server would discard the rest
					// of the body before the next request: a body not read
					// to its end closes the connection instead, so that a
					// stop does not wait for a slow client's remainder.
					_ = b.rc.SetReadDeadline(time.Now())
				}
			}()
		}
		h.ServeHTTP(w, r)
	})
}

// peerOf reads the request's origin: the connection's peer, or for a
// trusted proxy what it forwarded.
func (s *Server) peerOf(r *http.Request) peer {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	p := peer{secure: r.TLS != nil}
	if err != nil {
		return p
	}
	p.client = ap.Addr().Unmap()
	if !s.trusted(p.client) {
		return p
	}
	if proto := r.Header.Get("X-Forwarded-Proto"); proto != "" {
		p.secure = strings.EqualFold(strings.TrimSpace(proto), "https")
	}
	// The rightmost address that is not one of our proxies is the client
	// as far as we can vouch for it; anything left of it was written by
	// the client itself.
	var hops []string
	for _, v := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(v, ",")...)
	}
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			break
		}
		p.client = a.Unmap()
		if !s.trusted(p.client) {
			break
		}
	}
	return p
}

func (s *Server) trusted(a netip.Addr) bool {
	for _, pfx := range s.cfg.TrustedProxies {
		if pfx.Contains(a) {
			return true
		}
	}
	return false
}

// Secure reports whether r came over TLS as far as the listener can trust:
// its own TLS, or a trusted proxy's X-Forwarded-Proto: https. Outside a
// Server it is r.TLS != nil.
func Secure(r *http.Request) bool {
	if p, ok := r.Context().Value(ctxKey{}).(peer); ok {
		return p.secure
	}
	return r.TLS != nil
}

// ClientAddr is the address of r's client: the connection's peer, or, from
// a trusted proxy, the address it forwarded. Outside a Server it is the
// peer of r.RemoteAddr (invalid when that is not an address).
func ClientAddr(r *http.Request) netip.Addr {
	if p, ok := r.Context().Value(ctxKey{}).(peer); ok {
		return p.client
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

func (s *Server) addBody(b *rateBody) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return false
	}
	s.bodies[b] = struct{}{}
	return true
}

func (s *Server) removeBody(b *rateBody) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.bodies, b)
}

func (s *Server) isStopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

// errSlowBody is the error of a body that arrived too slowly.
var errSlowBody = errors.New("request body arrived below the minimum rate")

// errStopping is the error of a body read cut off by the stop.
var errStopping = errors.New("server stopping")

// rateBody is a request body that must keep arriving at the minimum rate:
// before each read the connection's read deadline is set to when the bytes
// received so far stop covering the elapsed time.
type rateBody struct {
	io.ReadCloser
	s      *Server
	rc     *http.ResponseController
	start  time.Time
	client netip.Addr
	n      int64
	done   bool
}

func (b *rateBody) Read(p []byte) (int, error) {
	if b.done {
		return b.ReadCloser.Read(p)
	}
	if b.s.isStopping() {
		return 0, errStopping
	}
	b.extend()
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	if errors.Is(err, io.EOF) {
		b.done = true
		// The whole body is in: the server reads the connection in the
		// background from now on, and a deadline passing there would
		// cancel the request's context while it is handled.
		_ = b.rc.SetReadDeadline(time.Time{})
		return n, err
	}
	var ne net.Error
	if err != nil && errors.As(err, &ne) && ne.Timeout() {
		if b.s.isStopping() {
			return n, fmt.Errorf("%w: %w", errStopping, err)
		}
		b.s.m.slow.WithLabelValues(b.s.cfg.Name).Inc()
		l := b.s.cfg.Limits
		b.s.logs.Warn(b.s.cfg.Logger, "slow-body "+b.client.String(), "request body cut off: it arrived below the minimum rate",
			"listener", b.s.cfg.Name, "client", b.client.String(), "bytes", b.n, "elapsed", time.Since(b.start).Round(time.Millisecond),
			"min_rate", l.MinBodyRate, "grace", l.BodyGrace)
		return n, fmt.Errorf("%w: %w", errSlowBody, err)
	}
	return n, err
}

// extend sets the connection's read deadline to when the bytes received so
// far stop covering the time elapsed.
func (b *rateBody) extend() {
	l := b.s.cfg.Limits
	deadline := b.start.Add(l.BodyGrace + time.Duration(float64(b.n)/float64(l.MinBodyRate)*float64(time.Second)))
	if l.ReadTimeout > 0 {
		deadline = minTime(deadline, b.start.Add(l.ReadTimeout))
	}
	_ = b.rc.SetReadDeadline(deadline)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// clientLimiter closes a connection beyond the per-client limit as soon as
// it is accepted.
type clientLimiter struct {
	net.Listener
	s    *Server
	max  int
	mu   sync.Mutex
	held map[netip.Addr]int
}

func (l *clientLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil || l.max <= 0 {
			return c, err
		}
		ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
		if err != nil {
			return c, nil
		}
		a := ap.Addr().Unmap()
		if l.s.trusted(a) {
			return c, nil
		}
		l.mu.Lock()
		if l.held[a] >= l.max {
			l.mu.Unlock()
			_ = c.Close()
			l.s.m.refused.WithLabelValues(l.s.cfg.Name).Inc()
			l.s.logs.Warn(l.s.cfg.Logger, "conns "+a.String(), "connection refused: the client holds the most connections allowed",
				"listener", l.s.cfg.Name, "client", a.String(), "max_conns_per_client", l.max)
			continue
		}
		l.held[a]++
		l.mu.Unlock()
		return &limitedConn{Conn: c, release: func() { l.release(a) }}, nil
	}
}

func (l *clientLimiter) release(a netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[a]--; l.held[a] <= 0 {
		delete(l.held, a)
	}
}

type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

type metrics struct {
	open    *prometheus.GaugeVec
	refused *prometheus.CounterVec
	slow    *prometheus.CounterVec
}

func newMetrics(r prometheus.Registerer) *metrics {
	m := &metrics{
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "msgx_http_open_connections",
			Help: "Connections a listener holds open."}, []string{"listener"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgx_http_connections_refused_total",
			Help: "Connections closed at accept because their client held the most connections allowed."}, []string{"listener"}),
		slow: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgx_http_slow_bodies_total",
			Help: "Requests cut off because their body arrived below the minimum rate."}, []string{"listener"}),
	}
	if r != nil {
		m.open = register(r, m.open)
		m.refused = register(r, m.refused)
		m.slow = register(r, m.slow)
	}
	return m
}

// register registers c, or returns the collector registered before by
// another listener.
func register[C prometheus.Collector](r prometheus.Registerer, c C) C {
	if err := r.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(fmt.Sprintf("httpserve: %v", err))
	}
	return c
}

// Sampler lets one log line per key through per period, and says in it how
// many were held back since the last: a flood of refused clients is
// counted in full by the metrics and summarised in the log.
type Sampler struct {
	clock  clock.Clock
	period time.Duration
	mu     sync.Mutex
	last   map[string]time.Time
	held   map[string]int
}

// NewSampler lets one line per key through per period of c.
func NewSampler(c clock.Clock, period time.Duration) *Sampler {
	return &Sampler{clock: c, period: period, last: map[string]time.Time{}, held: map[string]int{}}
}

// Warn logs msg at level WARN unless a line of the same key went out
// within the period.
func (s *Sampler) Warn(log *slog.Logger, key, msg string, args ...any) {
	s.mu.Lock()
	now := s.clock.Now()
	if t, ok := s.last[key]; ok && now.Sub(t) < s.period {
		s.held[key]++
		s.mu.Unlock()
		return
	}
	held := s.held[key]
	s.last[key] = now
	delete(s.held, key)
	// Forget keys not seen for a period, so a scan of many addresses does
	// not grow the map for ever.
	if len(s.last) > 1024 {
		for k, t := range s.last {
			if now.Sub(t) >= s.period {
				delete(s.last, k)
				delete(s.held, k)
			}
		}
	}
	s.mu.Unlock()
	if held > 0 {
		args = append(args, "similar_since_last_line", held)
	}
	log.Warn(msg, args...)
}
