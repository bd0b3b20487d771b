package app

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/msgx/msgx/app/config"
	"github.com/msgx/msgx/broker"
	"github.com/msgx/msgx/broker/kafka"
	"github.com/msgx/msgx/store/storetest"
)

// selfSigned returns a TLS certificate for 127.0.0.1 that is its own CA, and
// the PEM file of it.
func selfSigned(t *testing.T) (tls.Certificate, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kfake"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, path
}

// A Kafka that takes only TLS and SASL/SCRAM-SHA-512 connections: the
// service connects, publishes and is ready with the broker's CA and the
// right password; with a wrong password or an unknown CA it starts without
// the broker and /readyz says why.
func TestKafkaTLSAndSASL(t *testing.T) {
	cert, caFile := selfSigned(t)
	kf, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "sec"),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}),
		kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "msgx", "s3cret-pass"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kf.Close)
	_, dsn := storetest.NewSchema(t)
	yml := func(extra string) *config.Config {
		return loadConfig(t, fmt.Sprintf(`
store: {dsn: %q}
admin: {listen: "127.0.0.1:0"}
ingress: {listen: ""}
brokers:
  k:
    kind: kafka
    seeds: [%s]
%s`, dsn, strings.Join(kf.ListenAddrs(), ", "), extra), "MSGX_BROKERS_K_SASL_PASSWORD=s3cret-pass")
	}
	secure := fmt.Sprintf(`    tls: {ca-file: %q}
    sasl: {mechanism: scram-sha-512, user: msgx}
`, caFile)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	a, err := New(ctx, yml(secure), registry(), WithLogOutput(io.Discard))
	if err != nil {
		t.Fatalf("start with TLS and SASL: %v", err)
	}
	if err := a.brokers["k"].SendConfirmed(ctx, "sec", &broker.Message{Key: "k", Payload: []byte("over TLS")}); err != nil {
		t.Errorf("publish: %v", err)
	}
	if res, ok := a.admin.Ready(ctx); !ok {
		t.Errorf("not ready: %+v", res)
	}
	a.close(ctx)

	// A wrong password or an unknown CA looks like a broker that cannot be
	// reached: the service starts without the broker, keeps trying, and
	// /readyz names it with the reason.
	notReady := func(what string, cfg *config.Config, want string) {
		t.Helper()
		a, err := New(ctx, cfg, registry(), WithLogOutput(io.Discard))
		if err != nil {
			t.Fatalf("%s: the start failed: %v", what, err)
		}
		defer a.close(ctx)
		res, ok := a.admin.Ready(ctx)
		if ok || !strings.Contains(fmt.Sprintf("%+v", res), want) {
			t.Errorf("%s: ready %v: %+v", what, ok, res)
		}
	}
	wrong := yml(secure)
	wrong.Brokers["k"].Settings.(*kafka.Config).SASL.Password = "not-the-password"
	notReady("a wrong password", wrong, `SASL scram-sha-512 as "msgx"`)
	notReady("an unknown CA", yml("    tls: {enabled: true}\n    sasl: {mechanism: scram-sha-512, user: msgx}\n"), "certificate")
}
