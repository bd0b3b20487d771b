package rabbitmq

import (
	"fmt"
	"net/url"

	"github.com/msgx/msgx/broker/brokers"
	"github.com/msgx/msgx/broker/driver"
)

// Kind is the kind of a RabbitMQ broker block.
const Kind = "rabbitmq"

// Adapter is the RabbitMQ adapter for a brokers.Registry.
func Adapter() brokers.Adapter {
	return brokers.Adapter{Kind: Kind, New: func() brokers.Config { return &Config{} }}
}

// Config is a RabbitMQ broker block of the service's configuration.
type Config struct {
	// URL is the AMQP URL: amqp://user:password@host:5672/vhost, or
	// amqps:// for TLS. Its password may come from the environment
	// (MSGX_BROKERS_NAME_URL).
	URL string `yaml:"url"`
	// TLS is the TLS of an amqps:// URL (the CA, a client certificate, the
	// server name).
	TLS brokers.TLS `yaml:"tls"`
	// Auth is the login: plain (the URL's user and password, the
	// default) or external (SASL EXTERNAL: the broker takes the user from
	// the client certificate; needs tls.cert-file).
	Auth string `yaml:"auth"`
}

// SetDefaults implements brokers.Config.
func (c *Config) SetDefaults() {
	if c.Auth == "" {
		c.Auth = "plain"
	}
}

// Validate implements brokers.Config.
func (c *Config) Validate(chk *brokers.Check) {
	tlsURL := false
	if c.URL == "" {
		chk.Addf("url", "missing: the RabbitMQ server's URL (amqp:// or amqps://)")
	} else if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") {
		chk.Addf("url", "not an amqp:// or amqps:// URL")
	} else {
		tlsURL = u.Scheme == "amqps"
	}
	c.TLS.Validate(chk, "tls")
	if c.TLS.On() && c.URL != "" && !tlsURL {
		chk.Addf("tls", "TLS needs an amqps:// URL (the URL's scheme chooses TLS)")
	}
	switch c.Auth {
	case "plain":
	case "external":
		if !c.TLS.HasClientCert() {
			chk.Addf("auth", "external needs a client certificate: set tls.cert-file and tls.key-file")
		}
	default:
		chk.Addf("auth", "%q is not a login (plain or external)", c.Auth)
	}
}

// Driver implements brokers.Config.
func (c *Config) Driver(e brokers.Env) (driver.Broker, error) {
	opts := []Option{WithURL(c.URL), WithConnectionName("msgx-" + e.Name)}
	if e.Logger != nil {
		opts = append(opts, WithLogger(e.Logger))
	}
	if e.Registerer != nil {
		opts = append(opts, WithRegisterer(e.Registerer))
	}
	tc, err := c.TLS.Config(e.Logger)
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: tls.%w", err)
	}
	if tc != nil {
		opts = append(opts, WithTLS(tc))
	}
	if c.Auth == "external" {
		opts = append(opts, WithExternalAuth())
	}
	return New(opts...), nil
}
