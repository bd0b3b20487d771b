package rabbitmq_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/msgx/msgx/broker/brokers"
	"github.com/msgx/msgx/broker/brokertest"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/broker/rabbitmq"
	"github.com/msgx/msgx/broker/rabbitmq/rabbittest"
	"github.com/msgx/msgx/internal/tlsfiles/tlstest"
)

// tlsRabbit is a private RabbitMQ node (its own node name, ports, data,
// configuration and Erlang cookie in the test's directory, as the fault
// campaign starts one) with a TLS listener that asks for a client
// certificate of the test's CA and takes SASL EXTERNAL logins by the
// certificate's common name.
type tlsRabbit struct {
	port              int // the TLS listener's
	caFile, otherCA   string
	certFile, keyFile string // a client certificate for the user guest
	// a client certificate of the CA for a user the node does not have
	strangerCert, strangerKey string
}

func startTLSRabbit(t *testing.T) tlsRabbit {
	t.Helper()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "rabbitmq test CA")
	srvCert, srvKey := ca.Server(t, "rabbitmq").WriteFiles(t, brokertest.Subdir(t, dir, "server"))
	r := tlsRabbit{port: brokertest.FreePort(t), caFile: filepath.Join(dir, "ca.pem"), otherCA: filepath.Join(dir, "other-ca.pem")}
	tlstest.WriteFile(t, r.caFile, ca.PEM)
	tlstest.WriteFile(t, r.otherCA, tlstest.NewCA(t, "another CA").PEM)
	// EXTERNAL logs in as the certificate's common name: guest, whom the
	// node lets in from loopback.
	r.certFile, r.keyFile = ca.Client(t, "guest").WriteFiles(t, brokertest.Subdir(t, dir, "client"))
	r.strangerCert, r.strangerKey = ca.Client(t, "stranger").WriteFiles(t, brokertest.Subdir(t, dir, "stranger"))
	node, err := rabbittest.Prepare(dir, "msgxtls", fmt.Sprintf(`listeners.ssl.default = 127.0.0.1:%d
ssl_options.cacertfile = %s
ssl_options.certfile = %s
ssl_options.keyfile = %s
ssl_options.verify = verify_peer
ssl_options.fail_if_no_peer_cert = true
auth_mechanisms.1 = PLAIN
auth_mechanisms.2 = AMQPLAIN
auth_mechanisms.3 = EXTERNAL
ssl_cert_login_from = common_name
`, r.port, r.caFile, srvCert, srvKey), "rabbitmq_auth_mechanism_ssl")
	if err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := node.Command(context.Background(), "rabbitmq-server")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group: the script's Erlang VM and helpers are killed
	// with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		_ = logFile.Close()
	})
	// The node takes AMQP connections once it has booted.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := node.WaitAMQP(ctx, exited); err != nil {
		out, _ := os.ReadFile(logFile.Name())
		t.Fatalf("the private RabbitMQ node: %v\n%s", err, out)
	}
	return r
}

// driverOf builds the driver of c as the service does: defaults, checks,
// then the adapter.
func driverOf(t *testing.T, c *rabbitmq.Config) driver.Broker {
	t.Helper()
	if err := brokers.Prepare("r", c); err != nil {
		t.Fatal(err)
	}
	d, err := c.Driver(brokers.Env{Name: "r", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// A broker block with an amqps:// URL and TLS (the node's CA, a client
// certificate it verifies) reaches a TLS listener, logging in with the
// URL's user and password or with SASL EXTERNAL (the certificate); a wrong
// CA or no client certificate does not.
func TestTLSAndExternalAuth(t *testing.T) {
	r := startTLSRabbit(t)
	url := fmt.Sprintf("amqps://guest:guest@localhost:%d/", r.port)
	good := brokers.TLS{CAFile: r.caFile, CertFile: r.certFile, KeyFile: r.keyFile}
	t.Run("password", func(t *testing.T) {
		brokertest.RoundTrip(t, driverOf(t, &rabbitmq.Config{URL: url, TLS: good}))
	})
	t.Run("external", func(t *testing.T) {
		// No user or password: the node takes the certificate's name.
		brokertest.RoundTrip(t, driverOf(t, &rabbitmq.Config{URL: fmt.Sprintf("amqps://localhost:%d/", r.port), TLS: good, Auth: "external"}))
	})
	for _, tc := range []struct {
		name, want string
		c          *rabbitmq.Config
	}{
		{"an unknown CA", "x509", &rabbitmq.Config{URL: url, TLS: brokers.TLS{CAFile: r.otherCA, CertFile: r.certFile, KeyFile: r.keyFile}}},
		// TLS 1.3: the server checks the client's certificate after the
		// client's side of the handshake ended, so the client sees the alert,
		// or the connection reset, at its first read or write — or, when the
		// close comes while amqp091 opens the connection, as its 504
		// "channel/connection is not open".
		{"no client certificate", "certificate|connection reset|broken pipe|eof|connection is not open", &rabbitmq.Config{URL: url, TLS: brokers.TLS{CAFile: r.caFile}}},
		// EXTERNAL is the login indeed: a certificate of a user the node
		// lacks is refused.
		{"external as an unknown user", "not allowed", &rabbitmq.Config{URL: fmt.Sprintf("amqps://localhost:%d/", r.port),
			TLS: brokers.TLS{CAFile: r.caFile, CertFile: r.strangerCert, KeyFile: r.strangerKey}, Auth: "external"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			brokertest.StartRefused(t, driverOf(t, tc.c), tc.want)
		})
	}
}

// The settings' own checks: TLS needs amqps://, EXTERNAL a client
// certificate.
func TestTLSSettingsChecks(t *testing.T) {
	err := brokers.Prepare("r", &rabbitmq.Config{URL: "amqp://h/", TLS: brokers.TLS{Enabled: true}, Auth: "external"})
	for _, want := range []string{"r.tls: TLS needs an amqps:// URL", "r.auth: external needs a client certificate"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %q in %v", want, err)
		}
	}
}
