package pulsar

import (
	"fmt"
	"net/url"
	"os"

	"github.com/apache/pulsar-client-go/pulsar"

	"github.com/msgx/msgx/broker/brokers"
	"github.com/msgx/msgx/broker/driver"
)

// Kind is the kind of a Pulsar broker block.
const Kind = "pulsar"

// Adapter is the Pulsar adapter for a brokers.Registry.
func Adapter() brokers.Adapter {
	return brokers.Adapter{Kind: Kind, New: func() brokers.Config { return &Config{} }}
}

// Config is a Pulsar broker block of the service's configuration. The login
// is a token (token or token-file), else the client certificate when one is
// given (Pulsar's TLS authentication), else none.
type Config struct {
	// URL is the service URL: pulsar://host:6650, or pulsar+ssl://host:6651
	// for TLS.
	URL string `yaml:"url"`
	// TLS is the TLS of a pulsar+ssl:// URL.
	TLS brokers.TLS `yaml:"tls"`
	// Token is a JWT for Pulsar's token authentication: set it from the
	// environment (MSGX_BROKERS_NAME_TOKEN).
	Token string `yaml:"token"`
	// TokenFile is a file holding the token, read again at each
	// (re)connection so that a renewed token is taken up.
	TokenFile string `yaml:"token-file"`
}

// SetDefaults implements brokers.Config.
func (c *Config) SetDefaults() {}

// Validate implements brokers.Config.
func (c *Config) Validate(chk *brokers.Check) {
	secure := false
	if c.URL == "" {
		chk.Addf("url", "missing: the Pulsar service URL (pulsar:// or pulsar+ssl://)")
	} else if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "pulsar" && u.Scheme != "pulsar+ssl") {
		chk.Addf("url", "not a pulsar:// or pulsar+ssl:// URL")
	} else {
		secure = u.Scheme == "pulsar+ssl"
	}
	c.TLS.Validate(chk, "tls")
	if c.TLS.On() && c.URL != "" && !secure {
		chk.Addf("tls", "TLS needs a pulsar+ssl:// URL (the URL's scheme chooses TLS)")
	}
	if c.Token != "" && c.TokenFile != "" {
		chk.Addf("token", "token and token-file: give one")
	}
	if c.TokenFile != "" {
		if _, err := os.Stat(c.TokenFile); err != nil {
			chk.Addf("token-file", "cannot read %s: %v", c.TokenFile, err)
		}
	}
}

// Driver implements brokers.Config.
func (c *Config) Driver(e brokers.Env) (driver.Broker, error) {
	set, err := c.clientOptions(e)
	if err != nil {
		return nil, err
	}
	opts := []Option{WithClientOptions(set)}
	if e.Logger != nil {
		opts = append(opts, WithLogger(e.Logger))
	}
	if e.Registerer != nil {
		opts = append(opts, WithRegisterer(e.Registerer))
	}
	return New(c.URL, opts...), nil
}

// clientOptions is what the settings change in the client's options: the
// TLS configuration (used as is: the host dialled names the server unless
// tls.server-name does) and the authentication.
func (c *Config) clientOptions(e brokers.Env) (func(*pulsar.ClientOptions), error) {
	tc, err := c.TLS.Config(e.Logger)
	if err != nil {
		return nil, fmt.Errorf("pulsar: tls.%w", err)
	}
	var auth pulsar.Authentication
	switch {
	case c.Token != "":
		auth = pulsar.NewAuthenticationToken(c.Token)
	case c.TokenFile != "":
		auth = pulsar.NewAuthenticationTokenFromFile(c.TokenFile)
	case c.TLS.HasClientCert():
		// The certificate itself is presented by tc; this names the
		// method ("tls") to the broker.
		auth = pulsar.NewAuthenticationTLS(c.TLS.CertFile, c.TLS.KeyFile)
	}
	return func(co *pulsar.ClientOptions) {
		if tc != nil {
			co.TLSConfig = tc
			co.TLSAllowInsecureConnection = c.TLS.InsecureSkipVerify
			co.TLSValidateHostname = !c.TLS.InsecureSkipVerify
		}
		if auth != nil {
			co.Authentication = auth
		}
	}, nil
}
