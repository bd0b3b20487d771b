package tcpproxy

import (
	"io"
	"net"
	"testing"
	"time"
)

// TestProxyBlackHole: a black-holed connection stays open and answers
// nothing; Cut closes it; after the black hole new connections pass.
func TestProxyBlackHole(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	p, err := New(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	echo := func(c net.Conn) error {
		if _, err := c.Write([]byte("ping")); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		_, err := io.ReadFull(c, make([]byte, 4))
		return err
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := echo(c); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	p.BlackHole(true)
	if err := echo(c); err == nil {
		t.Fatal("a black-holed connection answered")
	} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("a black-holed connection must time out, not close: %v", err)
	}
	p.BlackHole(false)
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := echo(c2); err != nil {
		t.Fatalf("a new connection after the black hole: %v", err)
	}
	if p.Cut() != 2 {
		t.Error("Cut does not close both connections")
	}
	if err := echo(c2); err == nil {
		t.Error("a cut connection still answers")
	}
	p.Refuse(true)
	c3, err := net.Dial("tcp", p.Addr())
	if err == nil {
		defer c3.Close()
		if err := echo(c3); err == nil {
			t.Error("a refused connection answered")
		}
	}
}
