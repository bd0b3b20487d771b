package nats_test

import (
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/msgx/msgx/broker/brokers"
	"github.com/msgx/msgx/broker/brokertest"
	natsbroker "github.com/msgx/msgx/broker/nats"
	"github.com/msgx/msgx/internal/tlsfiles/tlstest"
)

// tlsServer is a private nats-server with JetStream that serves only TLS
// and asks for a client certificate of the test's CA, with the auth block
// given.
type tlsServer struct {
	url               string
	caFile            string
	certFile, keyFile string // a client certificate of the CA
	otherCA           string // a CA the server's certificate is not of
}

func startTLSServer(t *testing.T, auth string) tlsServer {
	t.Helper()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "nats test CA")
	srvCert, srvKey := ca.Server(t, "nats").WriteFiles(t, brokertest.Subdir(t, dir, "server"))
	s := tlsServer{caFile: filepath.Join(dir, "ca.pem"), otherCA: filepath.Join(dir, "other-ca.pem")}
	tlstest.WriteFile(t, s.caFile, ca.PEM)
	tlstest.WriteFile(t, s.otherCA, tlstest.NewCA(t, "another CA").PEM)
	s.certFile, s.keyFile = ca.Client(t, "msgx").WriteFiles(t, brokertest.Subdir(t, dir, "client"))
	port := brokertest.FreePort(t)
	conf := fmt.Sprintf(`listen: "127.0.0.1:%d"
jetstream { store_dir: %q, max_memory_store: 64MB, max_file_store: 256MB }
tls { cert_file: %q, key_file: %q, ca_file: %q, verify: true, timeout: 5 }
%s
`, port, filepath.Join(dir, "js"), srvCert, srvKey, s.caFile, auth)
	confFile := filepath.Join(dir, "nats.conf")
	tlstest.WriteFile(t, confFile, []byte(conf))
	brokertest.Server(t, dir, brokertest.Addr(port), "/usr/sbin/nats-server", "-c", confFile)
	s.url = fmt.Sprintf("tls://localhost:%d", port)
	return s
}

// open fills in the defaults of c and validates it, as the service does.
func open(t *testing.T, c *natsbroker.Config) (*natsbroker.Config, error) {
	t.Helper()
	if err := brokers.Prepare("n", c); err != nil {
		return nil, err
	}
	return c, nil
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// A broker block with TLS (the server's CA, a client certificate the server
// verifies) and each login NATS takes reaches a TLS-only server; a wrong CA
// or a missing client certificate does not.
func TestTLSAndLogins(t *testing.T) {
	seed, pub := newNKey(t)
	srv := startTLSServer(t, fmt.Sprintf(`authorization { users = [ {user: msgx, password: "s3cret-pw"}, {nkey: %q} ] }`, pub))
	seedFile := filepath.Join(t.TempDir(), "user.nk")
	tlstest.WriteFile(t, seedFile, seed)
	tls := brokers.TLS{CAFile: srv.caFile, CertFile: srv.certFile, KeyFile: srv.keyFile}
	env := brokers.Env{Name: "n", Logger: quiet()}

	for name, c := range map[string]*natsbroker.Config{
		"user and password": {URL: srv.url, TLS: tls, User: "msgx", Password: "s3cret-pw"},
		"nkey seed":         {URL: srv.url, TLS: tls, NKeySeedFile: seedFile},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := open(t, c)
			if err != nil {
				t.Fatal(err)
			}
			d, err := c.Driver(env)
			if err != nil {
				t.Fatal(err)
			}
			brokertest.RoundTrip(t, d)
		})
	}

	for _, tc := range []struct {
		name, want string
		c          *natsbroker.Config
	}{
		{"an unknown CA", "x509", &natsbroker.Config{URL: srv.url, TLS: brokers.TLS{CAFile: srv.otherCA, CertFile: srv.certFile, KeyFile: srv.keyFile}, User: "msgx", Password: "s3cret-pw"}},
		// The server refuses the handshake or ends the connection after it.
		{"no client certificate", "bad certificate|tls error", &natsbroker.Config{URL: srv.url, TLS: brokers.TLS{CAFile: srv.caFile}, User: "msgx", Password: "s3cret-pw"}},
		{"a wrong password", "authorization violation", &natsbroker.Config{URL: srv.url, TLS: tls, User: "msgx", Password: "wrong"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := open(t, tc.c)
			if err != nil {
				t.Fatal(err)
			}
			d, err := c.Driver(env)
			if err != nil {
				t.Fatal(err)
			}
			brokertest.StartRefused(t, d, tc.want)
		})
	}
}

// A token login, over TLS.
func TestTLSToken(t *testing.T) {
	srv := startTLSServer(t, `authorization { token: "t0ken-for-msgx" }`)
	c, err := open(t, &natsbroker.Config{URL: srv.url, TLS: brokers.TLS{CAFile: srv.caFile, CertFile: srv.certFile, KeyFile: srv.keyFile}, Token: "t0ken-for-msgx"})
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.Driver(brokers.Env{Name: "n", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	brokertest.RoundTrip(t, d)
}

// Two logins at once are refused, naming them.
func TestOneLogin(t *testing.T) {
	_, err := open(t, &natsbroker.Config{URL: "nats://h", Token: "x", User: "u", Password: "p"})
	if err == nil || !strings.Contains(err.Error(), "user, token: give one login only") {
		t.Errorf("two logins: %v", err)
	}
}

func newNKey(t *testing.T) (seed []byte, public string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	if seed, err = kp.Seed(); err != nil {
		t.Fatal(err)
	}
	if public, err = kp.PublicKey(); err != nil {
		t.Fatal(err)
	}
	return seed, public
}
