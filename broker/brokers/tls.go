package brokers

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"os"

	"github.com/msgx/msgx/internal/tlsfiles"
)

// TLS is the tls block every adapter takes: TLS to the broker, the CAs that
// sign its certificate and the client certificate it may ask for. It is on
// when Enabled is true or any file is given.
type TLS struct {
	Enabled bool `yaml:"enabled"`
	// CAFile is the PEM bundle of the CAs that sign the broker's
	// certificate (empty: the system's roots).
	CAFile string `yaml:"ca-file"`
	// CertFile and KeyFile are the client certificate and its key (PEM),
	// for brokers that authenticate clients by certificate; both or
	// neither. They are read again when they change.
	CertFile string `yaml:"cert-file"`
	KeyFile  string `yaml:"key-file"`
	// ServerName is the name the broker's certificate must hold (empty:
	// the host dialled).
	ServerName string `yaml:"server-name"`
	// InsecureSkipVerify accepts any certificate: tests only (refused in
	// production).
	InsecureSkipVerify bool `yaml:"insecure-skip-verify"`
}

// On reports whether TLS is configured.
func (t TLS) On() bool {
	return t.Enabled || t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.ServerName != "" || t.InsecureSkipVerify
}

// HasClientCert reports whether a client certificate is given.
func (t TLS) HasClientCert() bool { return t.CertFile != "" }

// Validate checks the block under key ("tls"): the files can be read, the
// certificate comes with its key, and the production profile refuses
// insecure-skip-verify.
func (t TLS) Validate(c *Check, key string) {
	for _, f := range []struct{ k, path string }{{"ca-file", t.CAFile}, {"cert-file", t.CertFile}, {"key-file", t.KeyFile}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			c.Addf(key+"."+f.k, "cannot read %s: %v", f.path, errors.Unwrap(err))
		}
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		c.Addf(key, "cert-file and key-file go together (a client certificate and its key)")
	}
	if c.Production && t.InsecureSkipVerify {
		c.Addf(key+".insecure-skip-verify", "the production profile refuses it: any host could pose as the broker; give the broker's CA in ca-file")
	}
}

// Config is the client tls.Config of the block; nil when TLS is off. The
// client certificate's reloads are logged to log.
func (t TLS) Config(log *slog.Logger) (*tls.Config, error) {
	if !t.On() {
		return nil, nil
	}
	if log == nil {
		log = slog.Default()
	}
	return tlsfiles.Client(tlsfiles.ClientFiles{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile,
		ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}, tlsfiles.WithLogger(log), tlsfiles.WithName("broker client"))
}
