package nats

import (
	"fmt"
	"os"
	"strings"

	natsio "github.com/nats-io/nats.go"

	"github.com/msgx/msgx/broker/brokers"
	"github.com/msgx/msgx/broker/driver"
)

// Kind is the kind of a NATS broker block.
const Kind = "nats"

// Adapter is the NATS adapter for a brokers.Registry.
func Adapter() brokers.Adapter {
	return brokers.Adapter{Kind: Kind, New: func() brokers.Config { return &Config{} }}
}

// Config is a NATS broker block of the service's configuration. At most one
// login is given: a credentials file, an nkey seed file, a user and
// password, or a token.
type Config struct {
	// URL is the server's URL (nats://host:4222, tls:// for TLS; several
	// comma-separated).
	URL string `yaml:"url"`
	// TLS is the TLS of the connection; on, it is required of the server.
	TLS brokers.TLS `yaml:"tls"`
	// CredsFile is a user credentials file (the user JWT and its nkey seed,
	// as nsc writes it).
	CredsFile string `yaml:"creds-file"`
	// NKeySeedFile is a file holding a user nkey seed (SU...).
	NKeySeedFile string `yaml:"nkey-seed-file"`
	User         string `yaml:"user"`
	// Password: set it from the environment (MSGX_BROKERS_NAME_PASSWORD).
	Password string `yaml:"password"`
	// Token: set it from the environment (MSGX_BROKERS_NAME_TOKEN).
	Token string `yaml:"token"`
}

// SetDefaults implements brokers.Config.
func (c *Config) SetDefaults() {}

// Validate implements brokers.Config.
func (c *Config) Validate(chk *brokers.Check) {
	if c.URL == "" {
		chk.Addf("url", "missing: the NATS server's URL (nats:// or tls://)")
	}
	c.TLS.Validate(chk, "tls")
	var logins []string
	for _, l := range []struct {
		key string
		set bool
	}{{"creds-file", c.CredsFile != ""}, {"nkey-seed-file", c.NKeySeedFile != ""}, {"user", c.User != "" || c.Password != ""}, {"token", c.Token != ""}} {
		if l.set {
			logins = append(logins, l.key)
		}
	}
	if len(logins) > 1 {
		chk.Addf("", "%s: give one login only", strings.Join(logins, ", "))
	}
	for _, f := range []struct{ key, path string }{{"creds-file", c.CredsFile}, {"nkey-seed-file", c.NKeySeedFile}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			chk.Addf(f.key, "cannot read %s: %v", f.path, err)
		}
	}
	if c.User != "" && c.Password == "" {
		chk.Addf("password", "missing (%s)", chk.Env("password"))
	}
	if c.Password != "" && c.User == "" {
		chk.Addf("user", "missing: a password goes with a user")
	}
}

// Driver implements brokers.Config.
func (c *Config) Driver(e brokers.Env) (driver.Broker, error) {
	nopts, err := c.natsOptions(e)
	if err != nil {
		return nil, err
	}
	opts := []Option{WithURL(c.URL), WithClientName("msgx-" + e.Name), WithNATSOptions(nopts...)}
	if e.Logger != nil {
		opts = append(opts, WithLogger(e.Logger))
	}
	return New(opts...), nil
}

// natsOptions are the client options of TLS and the login.
func (c *Config) natsOptions(e brokers.Env) ([]natsio.Option, error) {
	var opts []natsio.Option
	tc, err := c.TLS.Config(e.Logger)
	if err != nil {
		return nil, fmt.Errorf("nats: tls.%w", err)
	}
	if tc != nil {
		opts = append(opts, natsio.Secure(tc))
	}
	switch {
	case c.CredsFile != "":
		opts = append(opts, natsio.UserCredentials(c.CredsFile))
	case c.NKeySeedFile != "":
		o, err := natsio.NkeyOptionFromSeed(c.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("nats: nkey-seed-file: %w", err)
		}
		opts = append(opts, o)
	case c.User != "":
		opts = append(opts, natsio.UserInfo(c.User, c.Password))
	case c.Token != "":
		opts = append(opts, natsio.Token(c.Token))
	}
	return opts, nil
}
