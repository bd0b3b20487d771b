package httpserve

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/internal/tlsfiles/tlstest"
)

// start serves cfg on a loopback port and closes it at the test's end.
func start(t *testing.T, cfg Config) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Logger == nil {
		cfg.Logger = testkit.Quiet()
	}
	s := New(ln, cfg)
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	t.Cleanup(func() {
		_ = s.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	return s
}

// readAll echoes the body's length, or 400 when it cannot be read.
var readAll = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	fmt.Fprint(w, len(b))
})

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedWithin reports whether the server closed c (or answered and
// closed) within d; what it answered is returned.
func closedWithin(c net.Conn, d time.Duration) (string, bool) {
	_ = c.SetReadDeadline(time.Now().Add(d))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return string(b), false
	}
	return string(b), true
}

// A body that trickles in (one byte every 100 ms) is cut off once the
// grace is over; one that arrives at once is served.
func TestSlowBodyCutOff(t *testing.T) {
	reg := prometheus.NewRegistry()
	l := DefaultLimits()
	l.BodyGrace = 300 * time.Millisecond
	s := start(t, Config{Name: "test", Handler: readAll, Limits: l, Registerer: reg})
	c := dial(t, s.Addr().String())
	began := time.Now()
	if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := c.Write([]byte("x")); err != nil {
					return
				}
			}
		}
	})
	answer, closed := closedWithin(c, 5*time.Second)
	close(stop)
	wg.Wait()
	if !closed || !strings.Contains(answer, "400 Bad Request") {
		t.Fatalf("a trickling body was not cut off within 5 s (closed %v): %q", closed, answer)
	}
	if took := time.Since(began); took > 3*time.Second {
		t.Errorf("cut off after %v; the grace is 300ms", took)
	}
	if n := testutil.ToFloat64(s.m.slow.WithLabelValues("test")); n != 1 {
		t.Errorf("msgx_http_slow_bodies_total %v, want 1", n)
	}

	resp, err := http.Post("http://"+s.Addr().String()+"/", "text/plain", strings.NewReader(strings.Repeat("y", 100_000)))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "100000" {
		t.Errorf("a prompt body: %d %q", resp.StatusCode, b)
	}
}

// A body that completes is handled with no deadline left on the
// connection: a handler slower than the body's rate deadline keeps its
// context.
func TestHandlerOutlivesBodyDeadline(t *testing.T) {
	l := DefaultLimits()
	l.BodyGrace = 100 * time.Millisecond
	s := start(t, Config{Name: "test", Limits: l, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		select {
		case <-r.Context().Done():
			http.Error(w, "context ended", 500)
		case <-time.After(500 * time.Millisecond): // the work of the handler
			fmt.Fprint(w, "ok")
		}
	})})
	resp, err := http.Post("http://"+s.Addr().String()+"/", "text/plain", strings.NewReader("body"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "ok" {
		t.Errorf("got %d %q", resp.StatusCode, b)
	}
}

// 50 connections from one client: the per-client limit keeps 8, the rest
// are closed at once; an idle keep-alive connection is closed after the
// idle timeout; a closed connection frees its place.
func TestConnectionFlood(t *testing.T) {
	reg := prometheus.NewRegistry()
	l := DefaultLimits()
	l.MaxConnsPerClient = 8
	l.IdleTimeout = 300 * time.Millisecond
	s := start(t, Config{Name: "test", Handler: readAll, Limits: l, Registerer: reg})
	var conns []net.Conn
	for range 50 {
		conns = append(conns, dial(t, s.Addr().String()))
	}
	// The refused ones see EOF at once; a quiet period shows the kept ones
	// stay.
	var kept []net.Conn
	for _, c := range conns {
		if _, closed := closedWithin(c, 200*time.Millisecond); !closed {
			kept = append(kept, c)
		}
	}
	if len(kept) != 8 {
		t.Fatalf("%d connections kept, want 8", len(kept))
	}
	if n := testutil.ToFloat64(s.m.refused.WithLabelValues("test")); n != 42 {
		t.Errorf("msgx_http_connections_refused_total %v, want 42", n)
	}
	for _, c := range kept {
		c.Close()
	}
	// Freed places are taken again; a request then idles until closed.
	var c net.Conn
	deadline := time.Now().Add(5 * time.Second)
	for {
		c = dial(t, s.Addr().String())
		if _, closed := closedWithin(c, 100*time.Millisecond); !closed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the closed connections' places were not freed")
		}
	}
	if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	began := time.Now()
	if _, closed := closedWithin(c, 5*time.Second); !closed {
		t.Fatal("an idle keep-alive connection stayed open 5 s; the idle timeout is 300ms")
	}
	if took := time.Since(began); took < 200*time.Millisecond {
		t.Errorf("closed after %v, before the idle timeout", took)
	}
}

// A stop closes at once the connections that sent nothing, the idle ones
// and those trickling a body, and waits only for the request being
// handled, which is answered.
func TestShutdownWithSlowClients(t *testing.T) {
	l := DefaultLimits()
	l.BodyGrace = time.Minute // the stop, not the rate, must end the slow bodies
	l.MaxConnsPerClient = 0
	handling, release := make(chan struct{}), make(chan struct{})
	s := start(t, Config{Name: "test", Limits: l, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/work" {
			close(handling)
			<-release
			fmt.Fprint(w, "done")
			return
		}
		readAll(w, r)
	})})
	addr := s.Addr().String()
	var slow []net.Conn
	for range 10 {
		c := dial(t, addr)
		if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nabc"); err != nil {
			t.Fatal(err)
		}
		slow = append(slow, c)
	}
	var silent []net.Conn
	for range 10 {
		silent = append(silent, dial(t, addr))
	}
	idle := dial(t, addr)
	if _, err := io.WriteString(idle, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\na"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(idle)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	work := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/work")
		if err != nil {
			work <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		work <- string(b)
	}()
	<-handling
	// Every slow body is being read: wait until the server holds them.
	testkit.Eventually(t, "the ten bodies", 5*time.Second, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.bodies) == 10 })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stopped := make(chan error, 1)
	began := time.Now()
	go func() { stopped <- s.Shutdown(ctx) }()
	for i, c := range append(append(slow, silent...), idle) {
		if _, closed := closedWithin(c, 2*time.Second); !closed {
			t.Fatalf("connection %d still open 2 s into the stop", i)
		}
	}
	select {
	case err := <-stopped:
		t.Fatalf("the stop returned (%v) while a request was being handled", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if err := <-stopped; err != nil {
		t.Fatalf("stop: %v", err)
	}
	if got := <-work; got != "done" {
		t.Errorf("the request being handled: %q", got)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("the stop took %v", took)
	}
}

// X-Forwarded-Proto and X-Forwarded-For count from a trusted proxy only.
func TestTrustedProxies(t *testing.T) {
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%v %s", Secure(r), ClientAddr(r))
	})
	get := func(s *Server, hdr map[string]string) string {
		req, _ := http.NewRequest("GET", "http://"+s.Addr().String()+"/", nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	fwd := map[string]string{"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.9, 10.0.0.1, 198.51.100.7"}
	direct := start(t, Config{Name: "direct", Handler: echo, Limits: DefaultLimits()})
	if got := get(direct, fwd); got != "false 127.0.0.1" {
		t.Errorf("untrusted peer: %q", got)
	}
	proxied := start(t, Config{Name: "proxied", Handler: echo, Limits: DefaultLimits(),
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("198.51.100.0/24")}})
	// The rightmost hop that is not a trusted proxy is the client.
	if got := get(proxied, fwd); got != "true 10.0.0.1" {
		t.Errorf("trusted proxy: %q", got)
	}
	if got := get(proxied, map[string]string{"X-Forwarded-Proto": "http"}); got != "false 127.0.0.1" {
		t.Errorf("trusted proxy over http: %q", got)
	}
	r, _ := http.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.1:5000"
	if Secure(r) || ClientAddr(r) != netip.MustParseAddr("192.0.2.1") {
		t.Error("outside a server")
	}
}

// A TLS listener serves HTTPS (HTTP/1.1) and Secure says so.
func TestTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "CA")
	pair := ca.Server(t, "server")
	s := start(t, Config{Name: "tls", Limits: DefaultLimits(), TLS: &tls.Config{Certificates: []tls.Certificate{pair.TLS}},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "%v %s", Secure(r), r.Proto) })})
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}, ForceAttemptHTTP2: true}}
	resp, err := hc.Get("https://localhost:" + portOf(s) + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "true HTTP/1.1" {
		t.Errorf("got %q", b)
	}
	// Plain HTTP on the TLS port is no request.
	c := dial(t, s.Addr().String())
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	answer, _ := closedWithin(c, 2*time.Second)
	if bytes.Contains([]byte(answer), []byte("true")) {
		t.Errorf("plain HTTP served: %q", answer)
	}
}

func portOf(s *Server) string {
	_, p, _ := net.SplitHostPort(s.Addr().String())
	return p
}
