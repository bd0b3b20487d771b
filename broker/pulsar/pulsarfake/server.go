// Package pulsarfake is an in-process Pulsar broker that speaks the Pulsar
// binary protocol over TCP, for testing clients built on pulsar-client-go
// without a Pulsar installation (what kfake is for Kafka).
//
// It models what a client needs for publish and consume: the connection
// handshake and keep-alive, topic lookup (always answered by this server),
// non-partitioned persistent topics that keep what Pulsar's default retention
// keeps (the messages a subscription has not acknowledged), producers with
// send receipts, durable subscriptions (Exclusive, Shared, Failover and
// Key_Shared) with a cursor, flow control by permits, individual and
// cumulative acknowledgement, redelivery of unacknowledged messages (on
// request, with a redelivery count, and whenever a consumer closes or its
// connection drops), delayed delivery (deliver_at_time, honoured by Shared
// and Key_Shared subscriptions). Batched entries are stored and delivered
// whole, as a broker does. Everything else — persistence across restarts,
// partitioned topics, schemas, transactions, authentication, other
// retention policies and backlog quotas, deduplication, seek — is not
// modelled; requests for it are logged and answered with an error.
// WithTLS serves TLS (the listener's only: the protocol is the same).
//
// Tests reach three failure modes through the Server: Refuse makes the broker
// refuse producers on a topic, Unload closes a topic's producers and
// consumers as a topic unload does, and CutConnections drops every client
// connection (a brokertest.Proxy in front works as well, with Advertise naming
// the proxy so that clients stay on the path that can be cut).
package pulsarfake

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
)

// Server is a fake Pulsar broker listening on a loopback TCP port.
type Server struct {
	ln     net.Listener
	logger *slog.Logger

	mu         sync.Mutex
	advertised string
	scheme     string // pulsar:// or pulsar+ssl://
	topics     map[string]*topic
	refused    map[string]bool
	conns      map[*conn]struct{}
	nextLedger uint64
	nextName   uint64
	closed     bool

	wg sync.WaitGroup
}

// Option configures a Server.
type Option func(*config)

type config struct {
	addr   string
	logger *slog.Logger
	tls    *tls.Config
}

// WithAddr sets the listen address (default 127.0.0.1:0, a free port).
func WithAddr(addr string) Option { return func(c *config) { c.addr = addr } }

// WithTLS serves TLS only, with c (its certificate, and ClientAuth to ask
// for client certificates): the service URL and the lookups then say
// pulsar+ssl://.
func WithTLS(c *tls.Config) Option { return func(cfg *config) { cfg.tls = c } }

// WithLogger sets the logger for connection events and unmodelled commands
// (default: discard).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// New starts a server.
func New(opts ...Option) (*Server, error) {
	cfg := config{addr: "127.0.0.1:0", logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, o := range opts {
		o(&cfg)
	}
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return nil, fmt.Errorf("pulsarfake: listen: %w", err)
	}
	scheme := "pulsar://"
	if cfg.tls != nil {
		ln, scheme = tls.NewListener(ln, cfg.tls), "pulsar+ssl://"
	}
	s := &Server{
		ln:         ln,
		scheme:     scheme,
		logger:     cfg.logger,
		advertised: ln.Addr().String(),
		topics:     map[string]*topic{},
		refused:    map[string]bool{},
		conns:      map[*conn]struct{}{},
	}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Addr is the host:port the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL is the service URL clients use: pulsar:// (pulsar+ssl:// WithTLS)
// and the advertised address.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.scheme + s.advertised
}

// Advertise sets the host:port that topic lookups send clients to (default
// Addr). Put a TCP proxy's address here so every connection goes through it.
func (s *Server) Advertise(addr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advertised = addr
}

// Refuse makes the server answer producers on topic with an authorization
// error, so that publishing to it fails. Short names are completed as clients
// do (persistent://public/default/<name>).
func (s *Server) Refuse(topic string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refused[TopicName(topic)] = true
}

// CutConnections closes every client connection, as a broker crash or a
// network failure would. Clients reconnect; unacknowledged messages of their
// consumers are redelivered.
func (s *Server) CutConnections() {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
}

// Unload does to topic what a broker does when it unloads it (its bundle
// moves to another broker, or an administrator unloads it): it closes the
// topic's producers and consumers, telling their clients with CLOSE_PRODUCER
// and CLOSE_CONSUMER. The clients look the topic up again and re-attach;
// what the consumers held unacknowledged returns to their subscriptions. The
// topic keeps its messages and subscriptions. Unload returns how many
// producers and consumers it closed.
func (s *Server) Unload(topic string) (producers, consumers int) {
	name := TopicName(topic)
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		for id, p := range c.producers {
			if p.t.name != name {
				continue
			}
			delete(c.producers, id)
			c.send(typeCloseProducer, msg(nil).uint(1, id).uint(2, 0))
			producers++
		}
		for id, cons := range c.consumers {
			if cons.sub.t.name != name {
				continue
			}
			delete(c.consumers, id)
			cons.sub.removeConsumer(cons)
			c.send(typeCloseConsumer, msg(nil).uint(1, id).uint(2, 0))
			consumers++
		}
	}
	return producers, consumers
}

// Close stops listening, drops every connection and waits for them to end.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	err := s.ln.Close()
	s.CutConnections()
	s.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// TopicName completes a topic name the way Pulsar clients do: "t" is
// persistent://public/default/t and "tenant/ns/t" is persistent://tenant/ns/t.
func TopicName(name string) string {
	if strings.Contains(name, "://") {
		return name
	}
	if strings.Count(name, "/") == 2 {
		return "persistent://" + name
	}
	return "persistent://public/default/" + name
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = nc.Close()
			return
		}
		c := newConn(s, nc)
		s.conns[c] = struct{}{}
		s.wg.Add(2)
		s.mu.Unlock()
		go c.writeLoop()
		go c.readLoop()
	}
}

// dropConn forgets a closed connection: its producers go away and its
// consumers' unacknowledged messages return to their subscriptions.
func (s *Server) dropConn(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
	for _, cons := range c.consumers {
		cons.sub.removeConsumer(cons)
	}
	clear(c.consumers)
	clear(c.producers)
}

func (s *Server) topicLocked(name string) *topic {
	t := s.topics[name]
	if t == nil {
		s.nextLedger++
		t = &topic{mu: &s.mu, name: name, ledger: s.nextLedger, subs: map[string]*subscription{}}
		s.topics[name] = t
	}
	return t
}
