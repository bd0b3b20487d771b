// Package tcpproxy is a TCP proxy on the loopback interface that tests and
// the fault campaign put between msgx and a service to cut, refuse and
// black-hole its connections.
package tcpproxy

import (
	"net"
	"sync"
)

// Proxy is a TCP proxy on 127.0.0.1 between msgx and a service. Besides
// closing connections (a restart of the service as msgx sees it) it can
// refuse new ones (an outage) and black-hole them: bytes are accepted and
// dropped, nothing comes back and no FIN or RST is sent — the half-open
// connection of a dead host or a silent firewall.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	conns   map[*pair]struct{}
	refuse  bool
	holeNew bool
	closed  bool
}

type pair struct {
	down, up net.Conn
	mu       sync.Mutex
	holed    bool
}

func (p *pair) isHoled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.holed
}

func (p *pair) close() {
	_ = p.down.Close()
	if p.up != nil {
		_ = p.up.Close()
	}
}

// New listens on a free loopback port and forwards to target.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[*pair]struct{}{}}
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse, hole := p.refuse || p.closed, p.holeNew
		p.mu.Unlock()
		if refuse {
			_ = c.Close()
			continue
		}
		pr := &pair{down: c, holed: hole}
		if !hole {
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				_ = c.Close()
				continue
			}
			pr.up = up
		}
		p.mu.Lock()
		p.conns[pr] = struct{}{}
		p.mu.Unlock()
		go p.pipe(pr, pr.down, pr.up)
		if pr.up != nil {
			go p.pipe(pr, pr.up, pr.down)
		}
	}
}

// pipe copies src to dst until either side closes; once the pair is
// black-holed the bytes read are dropped.
func (p *Proxy) pipe(pr *pair, src, dst net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !pr.isHoled() && dst != nil {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	if !pr.isHoled() {
		pr.close()
		p.mu.Lock()
		delete(p.conns, pr)
		p.mu.Unlock()
	}
}

// Cut closes every open connection (both sides see it).
func (p *Proxy) Cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.conns)
	for pr := range p.conns {
		pr.close()
		delete(p.conns, pr)
	}
	return n
}

// Refuse makes new connections close at once (on) or pass again (off).
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	p.refuse = on
	p.mu.Unlock()
}

// BlackHole makes every open connection half-open — the proxy keeps it
// open, drops what it reads and answers nothing — and, while on, new
// connections too. Off: new connections pass again; the black-holed ones
// stay dead until their owner gives up on them, as after a real partition.
func (p *Proxy) BlackHole(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holeNew = on
	if !on {
		return
	}
	for pr := range p.conns {
		pr.mu.Lock()
		pr.holed = true
		pr.mu.Unlock()
		if pr.up != nil {
			// The service side is released; msgx's side stays open and silent.
			_ = pr.up.Close()
		}
	}
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.mu.Lock()
	for pr := range p.conns {
		pr.close()
		delete(p.conns, pr)
	}
	p.mu.Unlock()
	return err
}
