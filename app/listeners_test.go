package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/msgx/msgx/internal/tlsfiles/tlstest"
)

// listenersConfig is the embedded setup with the HTTP ingress on.
func listenersConfig(t *testing.T, extra string) string {
	t.Helper()
	return fmt.Sprintf(`
store: {dsn: "sqlite:%s"}
shutdown-timeout: 20s
brokers: {local: {kind: mem}}
mailboxes: {local: {kind: store, start: "from-beginning", poll-interval: 20ms}}
streams: {s: {processor: flop, mailbox: local, poll-interval: 20ms}}
relay: {poll-interval: 20ms, targets: {"kafka:msg": {broker: local}}}
`, filepath.Join(t.TempDir(), "msgx.db")) + extra
}

const plainListeners = `
admin: {listen: "127.0.0.1:0", read-token: "` + readTok + `", operator-token: "` + opTok + `"}
ingress: {listen: "127.0.0.1:0", stream: s}
`

// dialFrom connects to addr from the loopback address from (127.0.0.2: a
// client other than the test's own requests).
func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// slowBody starts a request whose body never finishes.
func slowBody(t *testing.T, c net.Conn, path string) {
	t.Helper()
	ct := "application/x-www-form-urlencoded"
	if path == "/cminmsgs/send" {
		ct = "application/xml"
	}
	if _, err := fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nContent-Length: 1000\r\n\r\n<", path, ct); err != nil {
		t.Fatal(err)
	}
}

// closedWithin reports whether the server closed c within d.
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.ReadAll(c)
	var ne net.Error
	return !errors.As(err, &ne) || !ne.Timeout()
}

func postMsg(t *testing.T, hc *http.Client, base string) (int, error) {
	t.Helper()
	resp, err := hc.Post(base+"/cminmsgs/send", "application/xml", strings.NewReader(`<MSG><META><SNDR>AODB</SNDR><SEQN>1</SEQN></META><FLOP/></MSG>`))
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// 32 connections trickling a body (as many as the ingress serves at once)
// do not take the ingress from the other senders: one client holds at
// most max-conns-per-client of them.
func TestSlowSendersDoNotStarveTheIngress(t *testing.T) {
	a := runApp(t, loadConfig(t, listenersConfig(t, plainListeners)))
	for range 32 {
		slowBody(t, dialFrom(t, "127.0.0.2", a.IngressAddr()), "/cminmsgs/send")
	}
	code, err := postMsg(t, http.DefaultClient, "http://"+a.IngressAddr())
	if err != nil || code != http.StatusOK {
		t.Fatalf("a sender beside 32 slow connections: %d %v, want 200", code, err)
	}
}

// 200 idle connections from one client: max-conns-per-client (16) stay,
// the rest are closed at once.
func TestIdleFloodIsBounded(t *testing.T) {
	a := runApp(t, loadConfig(t, listenersConfig(t, plainListeners)))
	for _, addr := range []string{a.AdminAddr(), a.IngressAddr()} {
		var conns []net.Conn
		for range 200 {
			conns = append(conns, dialFrom(t, "127.0.0.2", addr))
		}
		open := 0
		for _, c := range conns {
			if !closedWithin(c, 20*time.Millisecond) {
				open++
			}
		}
		if open != 16 {
			t.Errorf("%s: %d of 200 idle connections open, want 16", addr, open)
		}
	}
}

// A console login whose body trickles in is cut off once the grace (5 s)
// is over, not accepted minutes later.
func TestSlowConsoleLoginIsCutOff(t *testing.T) {
	a := runApp(t, loadConfig(t, listenersConfig(t, plainListeners)))
	c := dialFrom(t, "127.0.0.2", a.AdminAddr())
	slowBody(t, c, "/console/login")
	began := time.Now()
	if !closedWithin(c, 15*time.Second) {
		t.Fatal("a trickling login body still open after 15 s")
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("cut off after %v", took)
	}
}

// A stop with slow and idle clients on both listeners is prompt: they are
// closed at once, and the streams stop gracefully within the budget.
func TestStopWithSlowClients(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &syncWriter{w: &strings.Builder{}}
	a, err := New(ctx, loadConfig(t, listenersConfig(t, plainListeners)), registry(), WithLogOutput(logs))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	waitReadyz(t, a.AdminAddr(), 30*time.Second, "ready", func(code int, _ map[string]string) bool { return code == 200 })
	for _, addr := range []string{a.AdminAddr(), a.IngressAddr()} {
		for range 8 {
			slowBody(t, dialFrom(t, "127.0.0.2", addr), "/cminmsgs/send")
			dialFrom(t, "127.0.0.3", addr)
		}
	}
	began := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no stop within the shutdown-timeout")
	}
	if took := time.Since(began); took > 3*time.Second {
		t.Errorf("the stop took %v with slow clients open:\n%s", took, logs.String())
	}
	if strings.Contains(logs.String(), "abandoned") || strings.Contains(logs.String(), "still running at the stop deadline") {
		t.Errorf("the stop abandoned work:\n%s", logs.String())
	}
}

// Both listeners serve TLS from files; the ingress authenticates a sender
// by its client certificate; plain HTTP gets no answer.
func TestTLSListeners(t *testing.T) {
	ca := tlstest.NewCA(t, "site CA")
	adminCert, adminKey := ca.Server(t, "admin").WriteFiles(t, t.TempDir())
	ingCert, ingKey := ca.Server(t, "ingress").WriteFiles(t, t.TempDir())
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	tlstest.WriteFile(t, caFile, ca.PEM)
	a := runApp(t, loadConfig(t, listenersConfig(t, fmt.Sprintf(`
profile: embedded
admin:
  listen: "127.0.0.1:0"
  read-token: %q
  tls: {cert-file: %q, key-file: %q}
ingress:
  listen: "127.0.0.1:0"
  stream: s
  tls: {cert-file: %q, key-file: %q, client-ca-file: %q}
  senders: {aodb: {cert-names: [aodb.example], sndr: [AODB]}}
`, readTok, adminCert, adminKey, ingCert, ingKey, caFile))))
	client := func(certs ...tls.Certificate) *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", Certificates: certs}}}
	}
	resp, err := client().Get("https://" + a.AdminAddr() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("admin over TLS: %d", resp.StatusCode)
	}
	if resp, err := http.Get("http://" + a.AdminAddr() + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Error("admin answered plain HTTP")
		}
	}
	if code, err := postMsg(t, client(), "https://"+a.IngressAddr()); err != nil || code != http.StatusForbidden {
		t.Errorf("ingress without a client certificate: %d %v, want 403", code, err)
	}
	if code, err := postMsg(t, client(ca.Client(t, "aodb.example").TLS), "https://"+a.IngressAddr()); err != nil || code != http.StatusOK {
		t.Errorf("ingress with the sender's certificate: %d %v, want 200", code, err)
	}
}

// The console cookie is Secure over a trusted proxy's HTTPS, and only
// then.
func TestConsoleCookieFollowsTrustedProxy(t *testing.T) {
	login := func(a *App) string {
		req, _ := http.NewRequest(http.MethodPost, "http://"+a.AdminAddr()+"/console/login", strings.NewReader(url.Values{"token": {readTok}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Forwarded-Proto", "https")
		hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.Header.Get("Set-Cookie")
	}
	direct := runApp(t, loadConfig(t, listenersConfig(t, `
admin: {listen: "127.0.0.1:0", read-token: "`+readTok+`"}
ingress: {listen: ""}
`)))
	if c := login(direct); c == "" || strings.Contains(c, "Secure") {
		t.Errorf("an untrusted X-Forwarded-Proto made the cookie Secure: %q", c)
	}
	proxied := runApp(t, loadConfig(t, listenersConfig(t, `
admin: {listen: "127.0.0.1:0", read-token: "`+readTok+`", trusted-proxies: [127.0.0.1]}
ingress: {listen: ""}
`)))
	if c := login(proxied); !strings.Contains(c, "Secure") {
		t.Errorf("behind the trusted proxy the cookie is not Secure: %q", c)
	}
}

// syncWriter serialises the writes of concurrent loggers.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprint(s.w)
}
