package mqtt_test

import (
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"

	"github.com/msgx/msgx/broker/brokers"
	"github.com/msgx/msgx/broker/brokertest"
	"github.com/msgx/msgx/broker/driver"
	"github.com/msgx/msgx/broker/mqtt"
	"github.com/msgx/msgx/internal/tlsfiles/tlstest"
)

// tlsMosquitto is a private Mosquitto serving only TLS on a free port: it
// asks for a client certificate of the test's CA and a user name and
// password from its password file.
type tlsMosquitto struct {
	url               string
	caFile, otherCA   string
	certFile, keyFile string
	user, password    string
}

func startTLSMosquitto(t *testing.T) tlsMosquitto {
	t.Helper()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "mqtt test CA")
	srvCert, srvKey := ca.Server(t, "mosquitto").WriteFiles(t, brokertest.Subdir(t, dir, "server"))
	m := tlsMosquitto{caFile: filepath.Join(dir, "ca.pem"), otherCA: filepath.Join(dir, "other-ca.pem"), user: "msgx", password: "s3cret-pw"}
	tlstest.WriteFile(t, m.caFile, ca.PEM)
	tlstest.WriteFile(t, m.otherCA, tlstest.NewCA(t, "another CA").PEM)
	m.certFile, m.keyFile = ca.Client(t, "msgx").WriteFiles(t, brokertest.Subdir(t, dir, "client"))
	passwd := filepath.Join(dir, "passwd")
	tlstest.WriteFile(t, passwd, nil)
	if out, err := exec.Command("mosquitto_passwd", "-b", passwd, m.user, m.password).CombinedOutput(); err != nil {
		t.Fatalf("mosquitto_passwd: %v: %s", err, out)
	}
	port := brokertest.FreePort(t)
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	// user: Mosquitto started as root would otherwise switch to the user
	// mosquitto, which cannot read the test's files.
	conf := fmt.Sprintf(`user %s
per_listener_settings false
allow_anonymous false
password_file %s
persistence false
listener %d 127.0.0.1
cafile %s
certfile %s
keyfile %s
require_certificate true
`, me.Username, passwd, port, m.caFile, srvCert, srvKey)
	confFile := filepath.Join(dir, "mosquitto.conf")
	tlstest.WriteFile(t, confFile, []byte(conf))
	brokertest.Server(t, dir, brokertest.Addr(port), "mosquitto", "-c", confFile)
	m.url = fmt.Sprintf("mqtts://localhost:%d", port)
	return m
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// driverOf builds the driver of c as the service does: defaults, checks,
// then the adapter.
func driverOf(t *testing.T, c *mqtt.Config) driver.Broker {
	t.Helper()
	if err := brokers.Prepare("m", c); err != nil {
		t.Fatal(err)
	}
	d, err := c.Driver(brokers.Env{Name: "m", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// A broker block with TLS (the server's CA, a client certificate the server
// verifies) and a user name and password reaches a TLS-only Mosquitto; a
// wrong CA, no client certificate or a wrong password does not.
func TestTLSAndPassword(t *testing.T) {
	m := startTLSMosquitto(t)
	good := brokers.TLS{CAFile: m.caFile, CertFile: m.certFile, KeyFile: m.keyFile}
	brokertest.RoundTrip(t, driverOf(t, &mqtt.Config{URL: m.url, TLS: good, Username: m.user, Password: m.password}))

	for _, tc := range []struct {
		name, want string
		c          *mqtt.Config
	}{
		{"an unknown CA", "x509", &mqtt.Config{URL: m.url, TLS: brokers.TLS{CAFile: m.otherCA, CertFile: m.certFile, KeyFile: m.keyFile}, Username: m.user, Password: m.password}},
		// TLS 1.3: the server checks the client's certificate after the
		// client's side of the handshake ended, so the client sees the alert,
		// or the connection reset, at its first read or write.
		{"no client certificate", "certificate|connection reset|broken pipe|eof", &mqtt.Config{URL: m.url, TLS: brokers.TLS{CAFile: m.caFile}, Username: m.user, Password: m.password}},
		{"a wrong password", "reason: 135", // not authorized
			&mqtt.Config{URL: m.url, TLS: good, Username: m.user, Password: "wrong"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			brokertest.StartRefused(t, driverOf(t, tc.c), tc.want)
		})
	}
}

// TLS on an mqtt:// URL is refused: the scheme chooses TLS.
func TestTLSNeedsMQTTS(t *testing.T) {
	err := brokers.Prepare("m", &mqtt.Config{URL: "mqtt://h:1883", TLS: brokers.TLS{Enabled: true}})
	if err == nil || !strings.Contains(err.Error(), "m.tls: TLS needs an mqtts:// URL") {
		t.Errorf("tls on mqtt://: %v", err)
	}
}
