package brokers_test

import (
	"crypto/tls"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/msgx/msgx/broker/brokers"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/internal/tlsfiles/tlstest"
)

type fake struct{ bad bool }

func (*fake) SetDefaults() {}
func (f *fake) Validate(c *brokers.Check) {
	if f.bad {
		c.Addf("url", "missing (%s)", c.Env("url"))
	}
}
func (*fake) Driver(brokers.Env) (driver.Broker, error) { return nil, nil }

func TestRegistry(t *testing.T) {
	r := brokers.NewRegistry(brokers.Adapter{Kind: "b", New: func() brokers.Config { return &fake{} }},
		brokers.Adapter{Kind: "a", New: func() brokers.Config { return &fake{} }})
	if got := r.Kinds(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("kinds %v", got)
	}
	if c, ok := r.New("a"); !ok || c == nil {
		t.Error("no adapter a")
	}
	if _, ok := r.New("c"); ok {
		t.Error("an adapter c")
	}
	defer func() {
		if recover() == nil {
			t.Error("a kind registered twice did not panic")
		}
	}()
	r.Register(brokers.Adapter{Kind: "a", New: func() brokers.Config { return &fake{} }})
}

func TestCheck(t *testing.T) {
	c := &brokers.Check{Prefix: "brokers.main", EnvName: func(p string) string { return "VAR_" + strings.ToUpper(p) }}
	(&fake{bad: true}).Validate(c)
	if want := "brokers.main.url: missing (set VAR_BROKERS.MAIN.URL)"; len(c.Problems) != 1 || c.Problems[0] != want {
		t.Errorf("problems %q, want %q", c.Problems, want)
	}
	if err := brokers.Prepare("x", &fake{bad: true}); err == nil || !strings.Contains(err.Error(), "broker x: x.url: missing (set it)") {
		t.Errorf("Prepare: %v", err)
	}
}

func TestTLS(t *testing.T) {
	if tc, err := (brokers.TLS{}).Config(nil); tc != nil || err != nil {
		t.Errorf("off: %v, %v", tc, err)
	}
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "CA")
	caFile := filepath.Join(dir, "ca.pem")
	tlstest.WriteFile(t, caFile, ca.PEM)
	certFile, keyFile := ca.Client(t, "me").WriteFiles(t, dir)
	tc, err := brokers.TLS{CAFile: caFile, CertFile: certFile, KeyFile: keyFile, ServerName: "b.example"}.Config(nil)
	if err != nil {
		t.Fatal(err)
	}
	if tc.ServerName != "b.example" || tc.RootCAs == nil || tc.MinVersion != tls.VersionTLS12 || tc.InsecureSkipVerify {
		t.Errorf("config %+v", tc)
	}
	if cert, err := tc.GetClientCertificate(&tls.CertificateRequestInfo{}); err != nil || cert.Leaf.Subject.CommonName != "me" {
		t.Errorf("client certificate: %v", err)
	}

	c := &brokers.Check{Prefix: "b", Production: true}
	brokers.TLS{CAFile: "/nowhere", CertFile: certFile, InsecureSkipVerify: true}.Validate(c, "tls")
	for _, want := range []string{"b.tls.ca-file: cannot read /nowhere", "b.tls: cert-file and key-file go together", "b.tls.insecure-skip-verify: the production profile refuses it"} {
		if !slices.ContainsFunc(c.Problems, func(p string) bool { return strings.HasPrefix(p, want) }) {
			t.Errorf("no problem %q in %q", want, c.Problems)
		}
	}
}
