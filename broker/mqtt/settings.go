package mqtt

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/msgx/msgx/broker/brokers"
	"github.com/msgx/msgx/broker/driver"
)

// Kind is the kind of an MQTT broker block.
const Kind = "mqtt"

// Adapter is the MQTT adapter for a brokers.Registry.
func Adapter() brokers.Adapter {
	return brokers.Adapter{Kind: Kind, New: func() brokers.Config { return &Config{} }}
}

// Config is an MQTT broker block of the service's configuration.
type Config struct {
	// URL is the server's URL: mqtt://host:1883, or mqtts://host:8883 for
	// TLS.
	URL string `yaml:"url"`
	// TLS is the TLS of an mqtts:// URL.
	TLS brokers.TLS `yaml:"tls"`
	// Username and Password are the CONNECT credentials.
	Username string `yaml:"username"`
	// Password: set it from the environment (MSGX_BROKERS_NAME_PASSWORD).
	Password string `yaml:"password"`
}

// SetDefaults implements brokers.Config.
func (c *Config) SetDefaults() {}

// Validate implements brokers.Config.
func (c *Config) Validate(chk *brokers.Check) {
	secure := false
	if c.URL == "" {
		chk.Addf("url", "missing: the MQTT server's URL (mqtt:// or mqtts://)")
	} else if u, err := url.Parse(c.URL); err != nil || !strings.Contains(c.URL, "://") {
		chk.Addf("url", "not a URL (mqtt://host:1883 or mqtts://host:8883)")
	} else {
		// The schemes the client dials with TLS.
		secure = slices.Contains([]string{"mqtts", "ssl", "tls"}, u.Scheme)
	}
	c.TLS.Validate(chk, "tls")
	if c.TLS.On() && c.URL != "" && !secure {
		chk.Addf("tls", "TLS needs an mqtts:// URL (the URL's scheme chooses TLS)")
	}
	if c.Password != "" && c.Username == "" {
		chk.Addf("username", "missing: a password goes with a user name")
	}
}

// Driver implements brokers.Config.
func (c *Config) Driver(e brokers.Env) (driver.Broker, error) {
	var opts []Option
	if e.Logger != nil {
		opts = append(opts, WithLogger(e.Logger))
	}
	tc, err := c.TLS.Config(e.Logger)
	if err != nil {
		return nil, fmt.Errorf("mqtt: tls.%w", err)
	}
	if tc != nil {
		opts = append(opts, WithTLS(tc))
	}
	if c.Username != "" {
		opts = append(opts, WithCredentials(c.Username, []byte(c.Password)))
	}
	d, err := New(c.URL, opts...)
	if err != nil {
		return nil, err
	}
	return d, nil
}
