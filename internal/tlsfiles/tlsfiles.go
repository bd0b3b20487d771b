// Package tlsfiles serves a TLS certificate from a certificate file and a key
// file (PEM) and takes up a renewed pair without a restart: at a handshake,
// at most once per check interval, it compares the files' modification time
// and size with those it loaded, and reads them again when either changed.
// A pair that fails to load (the key written after the certificate, a key
// that does not match) leaves the previous certificate in service; the
// failure is logged once per change of the files and counted, and the next
// change is tried again.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgx/msgx/clock"
)

// DefaultCheckInterval is how often, at most, the files are looked at.
const DefaultCheckInterval = time.Second

// Certificate is a certificate and key pair read from files.
type Certificate struct {
	certFile, keyFile string
	o                 options

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   [2]stamp // of the files as last read, loaded or not
	checked time.Time
}

// stamp is what tells a changed file: its modification time and size.
type stamp struct {
	mod  time.Time
	size int64
}

type options struct {
	clock    clock.Clock
	interval time.Duration
	log      *slog.Logger
	name     string
	reloads  *prometheus.CounterVec
	expiry   *prometheus.GaugeVec
}

// Option configures Load.
type Option func(*options)

// WithClock sets the clock of the check interval (default the wall clock).
func WithClock(c clock.Clock) Option { return func(o *options) { o.clock = c } }

// WithCheckInterval sets how often, at most, a handshake looks at the files
// (default DefaultCheckInterval).
func WithCheckInterval(d time.Duration) Option { return func(o *options) { o.interval = d } }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithName names the listener the certificate serves in logs and metrics
// (default "tls").
func WithName(name string) Option { return func(o *options) { o.name = name } }

// WithRegisterer registers msgx_tls_reloads_total{listener,result} and
// msgx_tls_certificate_expiry_timestamp_seconds{listener} (default: none).
// Several listeners may share one registry.
func WithRegisterer(r prometheus.Registerer) Option {
	return func(o *options) {
		o.reloads = register(r, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgx_tls_reloads_total",
			Help: "Reloads of a listener's certificate and key files after they changed, by result (ok, error)."}, []string{"listener", "result"}))
		o.expiry = register(r, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "msgx_tls_certificate_expiry_timestamp_seconds",
			Help: "When the certificate a listener serves expires (Unix time)."}, []string{"listener"}))
	}
}

// register registers c, or returns the collector of the same description
// registered before (by another listener's certificate).
func register[C prometheus.Collector](r prometheus.Registerer, c C) C {
	if err := r.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(fmt.Sprintf("tlsfiles: %v", err))
	}
	return c
}

// Load reads the pair; an error says why it cannot serve.
func Load(certFile, keyFile string, opts ...Option) (*Certificate, error) {
	o := options{clock: clock.Real{}, interval: DefaultCheckInterval, log: slog.Default(), name: "tls"}
	for _, opt := range opts {
		opt(&o)
	}
	c := &Certificate{certFile: certFile, keyFile: keyFile, o: o}
	st, err := c.stat()
	if err != nil {
		return nil, err
	}
	cert, err := c.read()
	if err != nil {
		return nil, err
	}
	c.cert, c.stamp, c.checked = cert, st, o.clock.Now()
	c.observe(cert)
	return c, nil
}

// GetCertificate is tls.Config's GetCertificate: the current pair, read
// again first when the files changed since the last look.
func (c *Certificate) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.o.clock.Now()
	if now.Sub(c.checked) < c.o.interval {
		return c.cert, nil
	}
	c.checked = now
	st, err := c.stat()
	if err != nil || st == c.stamp {
		// A file missing for a moment (being replaced) keeps the pair in
		// service; it is looked at again at the next interval.
		return c.cert, nil
	}
	c.stamp = st
	cert, err := c.read()
	if err != nil {
		c.count("error")
		c.o.log.Error("TLS certificate files changed but cannot be loaded; the previous certificate stays in service",
			"listener", c.o.name, "cert_file", c.certFile, "key_file", c.keyFile, "err", err)
		return c.cert, nil
	}
	c.cert = cert
	c.count("ok")
	c.observe(cert)
	c.o.log.Info("TLS certificate reloaded", "listener", c.o.name, "cert_file", c.certFile,
		"subject", cert.Leaf.Subject.String(), "not_after", cert.Leaf.NotAfter)
	return cert, nil
}

func (c *Certificate) stat() ([2]stamp, error) {
	var st [2]stamp
	for i, f := range []string{c.certFile, c.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return st, fmt.Errorf("tls: %w", err)
		}
		st[i] = stamp{mod: fi.ModTime(), size: fi.Size()}
	}
	return st, nil
}

func (c *Certificate) read() (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: certificate %s and key %s: %w", c.certFile, c.keyFile, err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("tls: certificate %s: %w", c.certFile, err)
		}
	}
	return &cert, nil
}

func (c *Certificate) count(result string) {
	if c.o.reloads != nil {
		c.o.reloads.WithLabelValues(c.o.name, result).Inc()
	}
}

func (c *Certificate) observe(cert *tls.Certificate) {
	if c.o.expiry != nil {
		c.o.expiry.WithLabelValues(c.o.name).Set(float64(cert.Leaf.NotAfter.Unix()))
	}
}

// LoadCAPool reads a PEM bundle of CA certificates, e.g. those trusted to
// sign client certificates.
func LoadCAPool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("tls: %s holds no PEM certificate", file)
	}
	return pool, nil
}

// GetClientCertificate is tls.Config's GetClientCertificate: the client side
// of GetCertificate, so that a client certificate renewed on disk is taken up
// by the next connection as a listener's is.
func (c *Certificate) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return c.GetCertificate(nil)
}

// ClientFiles are the files of a client's TLS: the CAs it trusts and its
// own certificate and key, all PEM and all optional.
type ClientFiles struct {
	// CAFile is the bundle of CAs that sign the servers' certificates
	// (empty: the system's roots).
	CAFile string
	// CertFile and KeyFile are the client certificate and its key, for
	// servers that authenticate clients by certificate; both or neither.
	CertFile, KeyFile string
	// ServerName is the name the server's certificate must hold (empty:
	// the host the client dials).
	ServerName string
	// InsecureSkipVerify accepts any server certificate (tests only).
	InsecureSkipVerify bool
}

// Client is a client's tls.Config from its files. The client certificate,
// when given, is read again when its files change (as a listener's is).
func Client(f ClientFiles, opts ...Option) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName, InsecureSkipVerify: f.InsecureSkipVerify} //nolint:gosec // InsecureSkipVerify is the caller's choice; config validation refuses it in production
	if f.CAFile != "" {
		pool, err := LoadCAPool(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ca-file: %w", err)
		}
		tc.RootCAs = pool
	}
	if (f.CertFile == "") != (f.KeyFile == "") {
		return nil, errors.New("cert-file and key-file go together (a client certificate and its key)")
	}
	if f.CertFile != "" {
		cert, err := Load(f.CertFile, f.KeyFile, opts...)
		if err != nil {
			return nil, fmt.Errorf("cert-file/key-file: %w", err)
		}
		tc.GetClientCertificate = cert.GetClientCertificate
	}
	return tc, nil
}
