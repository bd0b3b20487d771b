package pulsar

import (
	"crypto/tls"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/msgx/msgx/broker/brokers"
	"github.com/msgx/msgx/internal/tlsfiles/tlstest"
)

// The mapping of the settings onto the client's options. pulsarfake checks
// no token, so the logins are tested here; tls_test.go takes the TLS
// configuration to pulsarfake serving TLS.
func TestClientOptions(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "pulsar test CA")
	caFile := filepath.Join(dir, "ca.pem")
	tlstest.WriteFile(t, caFile, ca.PEM)
	certFile, keyFile := ca.Client(t, "msgx").WriteFiles(t, dir)
	tokenFile := filepath.Join(dir, "token")
	tlstest.WriteFile(t, tokenFile, []byte("jwt-from-file"))

	apply := func(t *testing.T, c *Config) pulsar.ClientOptions {
		t.Helper()
		if err := brokers.Prepare("p", c); err != nil {
			t.Fatal(err)
		}
		set, err := c.clientOptions(brokers.Env{})
		if err != nil {
			t.Fatal(err)
		}
		var co pulsar.ClientOptions
		set(&co)
		return co
	}

	t.Run("tls with a client certificate", func(t *testing.T) {
		co := apply(t, &Config{URL: "pulsar+ssl://localhost:6651", TLS: brokers.TLS{CAFile: caFile, CertFile: certFile, KeyFile: keyFile, ServerName: "pulsar.example"}})
		if co.TLSConfig == nil || co.TLSConfig.RootCAs == nil || co.TLSConfig.ServerName != "pulsar.example" || co.TLSConfig.MinVersion != tls.VersionTLS12 {
			t.Fatalf("TLS config %+v", co.TLSConfig)
		}
		cert, err := co.TLSConfig.GetClientCertificate(&tls.CertificateRequestInfo{})
		if err != nil || cert.Leaf.Subject.CommonName != "msgx" {
			t.Errorf("client certificate %v, %v", cert, err)
		}
		if !co.TLSValidateHostname || co.TLSAllowInsecureConnection {
			t.Errorf("hostname validation %v, insecure %v", co.TLSValidateHostname, co.TLSAllowInsecureConnection)
		}
		// Without a token the certificate is the login (Pulsar's "tls").
		if co.Authentication == nil {
			t.Error("no authentication: want TLS authentication")
		}
	})
	t.Run("token", func(t *testing.T) {
		co := apply(t, &Config{URL: "pulsar+ssl://localhost:6651", TLS: brokers.TLS{CAFile: caFile}, Token: "jwt"})
		if co.TLSConfig == nil || co.TLSConfig.GetClientCertificate != nil || co.Authentication == nil {
			t.Errorf("options %+v", co)
		}
	})
	t.Run("token file", func(t *testing.T) {
		if co := apply(t, &Config{URL: "pulsar://localhost:6650", TokenFile: tokenFile}); co.Authentication == nil || co.TLSConfig != nil {
			t.Errorf("options %+v", co)
		}
	})
	t.Run("nothing", func(t *testing.T) {
		if co := apply(t, &Config{URL: "pulsar://localhost:6650"}); co.Authentication != nil || co.TLSConfig != nil {
			t.Errorf("options %+v", co)
		}
	})
	t.Run("checks", func(t *testing.T) {
		err := brokers.Prepare("p", &Config{URL: "pulsar://h:6650", TLS: brokers.TLS{Enabled: true}, Token: "a", TokenFile: "/nowhere"})
		for _, want := range []string{"p.tls: TLS needs a pulsar+ssl:// URL", "p.token: token and token-file", "p.token-file: cannot read /nowhere"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("want %q in %v", want, err)
			}
		}
	})
}
