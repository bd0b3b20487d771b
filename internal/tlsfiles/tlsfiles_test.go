package tlsfiles

import (
	"bytes"
	"crypto/tls"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/msgx/msgx/clock"
	"github.com/msgx/msgx/internal/tlsfiles/tlstest"
)

// serving is the common name of the certificate a handshake gets.
func serving(t *testing.T, c *Certificate) string {
	t.Helper()
	cert, err := c.GetCertificate(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatal(err)
	}
	return cert.Leaf.Subject.CommonName
}

// A renewed pair is served after the check interval; a broken one leaves
// the previous pair in service, logged once and counted, until it is
// fixed.
func TestReloadOnChange(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	dir := t.TempDir()
	certFile, keyFile := ca.Server(t, "first").WriteFiles(t, dir)
	fc := clock.NewFake(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	c, err := Load(certFile, keyFile, WithClock(fc), WithCheckInterval(time.Second), WithName("ingress"),
		WithLogger(slog.New(slog.NewTextHandler(&logs, nil))), WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	if got := serving(t, c); got != "first" {
		t.Fatalf("serving %q", got)
	}
	second := ca.Server(t, "second-renewed")
	second.WriteFiles(t, dir)
	// Within the interval the files are not looked at.
	if got := serving(t, c); got != "first" {
		t.Fatalf("looked at the files within the interval: serving %q", got)
	}
	fc.Advance(time.Second)
	if got := serving(t, c); got != "second-renewed" {
		t.Fatalf("after the change: serving %q", got)
	}

	// The certificate replaced first, its key not yet: the pair does not
	// match and the previous one stays.
	third := ca.Server(t, "third")
	tlstest.WriteFile(t, certFile, third.CertPEM)
	fc.Advance(time.Second)
	if got := serving(t, c); got != "second-renewed" {
		t.Fatalf("a mismatched pair replaced the certificate: %q", got)
	}
	fc.Advance(time.Second)
	serving(t, c) // unchanged files: no second log line
	if n := strings.Count(logs.String(), "cannot be loaded"); n != 1 {
		t.Errorf("%d log lines for one broken change:\n%s", n, logs.String())
	}
	tlstest.WriteFile(t, keyFile, third.KeyPEM)
	fc.Advance(time.Second)
	if got := serving(t, c); got != "third" {
		t.Fatalf("after the key: serving %q", got)
	}
	if ok, bad := testutil.ToFloat64(c.o.reloads.WithLabelValues("ingress", "ok")), testutil.ToFloat64(c.o.reloads.WithLabelValues("ingress", "error")); ok != 2 || bad != 1 {
		t.Errorf("reloads ok %v error %v, want 2 and 1", ok, bad)
	}
	if exp := testutil.ToFloat64(c.o.expiry.WithLabelValues("ingress")); int64(exp) != third.Leaf.NotAfter.Unix() {
		t.Errorf("expiry %v, want %v", exp, third.Leaf.NotAfter.Unix())
	}

	// A file missing for a moment keeps the pair.
	if err := os.Remove(keyFile); err != nil {
		t.Fatal(err)
	}
	fc.Advance(time.Second)
	if got := serving(t, c); got != "third" {
		t.Fatalf("a missing key file: serving %q", got)
	}

	// A second listener on the same registry.
	other := t.TempDir()
	cf, kf := ca.Server(t, "admin").WriteFiles(t, other)
	if _, err := Load(cf, kf, WithName("admin"), WithRegisterer(reg)); err != nil {
		t.Fatal(err)
	}
}

// A real handshake gets the renewed certificate.
func TestHandshakeAfterRenewal(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	dir := t.TempDir()
	certFile, keyFile := ca.Server(t, "old").WriteFiles(t, dir)
	fc := clock.NewFake(time.Now())
	c, err := Load(certFile, keyFile, WithClock(fc))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: c.GetCertificate})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_ = conn.(*tls.Conn).Handshake()
			conn.Close()
		}
	}()
	peer := func() string {
		conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	if got := peer(); got != "old" {
		t.Fatalf("peer %q", got)
	}
	ca.Server(t, "new").WriteFiles(t, dir)
	fc.Advance(DefaultCheckInterval)
	if got := peer(); got != "new" {
		t.Fatalf("after renewal: peer %q", got)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "none.pem"), filepath.Join(dir, "none.key")); err == nil {
		t.Error("missing files loaded")
	}
	ca := tlstest.NewCA(t, "CA")
	a, b := ca.Server(t, "a"), ca.Server(t, "b")
	tlstest.WriteFile(t, filepath.Join(dir, "c.pem"), a.CertPEM)
	tlstest.WriteFile(t, filepath.Join(dir, "k.pem"), b.KeyPEM)
	if _, err := Load(filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")); err == nil {
		t.Error("a mismatched pair loaded")
	}
	tlstest.WriteFile(t, filepath.Join(dir, "ca.pem"), ca.PEM)
	if _, err := LoadCAPool(filepath.Join(dir, "ca.pem")); err != nil {
		t.Error(err)
	}
	if _, err := LoadCAPool(filepath.Join(dir, "k.pem")); err == nil {
		t.Error("a key file read as a CA bundle")
	}
}
