package pulsar_test

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/broker/brokers"
	"github.com/msgx/msgx/broker/brokertest"
	"github.com/msgx/msgx/broker/pulsar"
	"github.com/msgx/msgx/broker/pulsar/pulsarfake"
	"github.com/msgx/msgx/internal/testkit"
	"github.com/msgx/msgx/internal/tlsfiles/tlstest"
)

// A broker block with a pulsar+ssl:// URL and TLS (the server's CA, a client
// certificate the server verifies) reaches a TLS-only server, and an
// unknown CA does not. The server is pulsarfake behind TLS: this machine
// runs no Pulsar.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "pulsar test CA")
	srv, err := pulsarfake.New(pulsarfake.WithTLS(&tls.Config{MinVersion: tls.VersionTLS12,
		Certificates: []tls.Certificate{ca.Server(t, "pulsar").TLS}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool()}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	caFile, otherCA := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "other-ca.pem")
	tlstest.WriteFile(t, caFile, ca.PEM)
	tlstest.WriteFile(t, otherCA, tlstest.NewCA(t, "another CA").PEM)
	certFile, keyFile := ca.Client(t, "msgx").WriteFiles(t, dir)
	if !strings.HasPrefix(srv.URL(), "pulsar+ssl://") {
		t.Fatalf("the fake's URL %s", srv.URL())
	}
	open := func(t *testing.T, c *pulsar.Config) (*pulsar.Config, brokers.Env) {
		t.Helper()
		if err := brokers.Prepare("p", c); err != nil {
			t.Fatal(err)
		}
		return c, brokers.Env{Name: "p", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	}

	t.Run("client certificate", func(t *testing.T) {
		c, env := open(t, &pulsar.Config{URL: srv.URL(), TLS: brokers.TLS{CAFile: caFile, CertFile: certFile, KeyFile: keyFile}})
		d, err := c.Driver(env)
		if err != nil {
			t.Fatal(err)
		}
		brokertest.RoundTrip(t, d)
	})
	t.Run("an unknown CA", func(t *testing.T) {
		c, env := open(t, &pulsar.Config{URL: srv.URL(), TLS: brokers.TLS{CAFile: otherCA, CertFile: certFile, KeyFile: keyFile}})
		var logs testkit.Buffer
		env.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		d, err := c.Driver(env)
		if err != nil {
			t.Fatal(err)
		}
		// The client retries the handshake until the start's deadline.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		err = d.Start(ctx)
		if err == nil {
			_ = d.Close(ctx)
			t.Fatal("started")
		}
		// The client logs why: the server's certificate is not of a CA it
		// trusts.
		if !strings.Contains(logs.String(), "x509") {
			t.Errorf("start failed with %v; the client's log does not say x509:\n%s", err, logs.String())
		}
	})
}
