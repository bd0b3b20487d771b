package driver

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
)

func TestTooLargeIsRejectedWithSizeAndLimit(t *testing.T) {
	err := TooLarge("orders", 2048, 1024)
	if Code(err) != Rejected || !errors.Is(err, ErrTooLarge) {
		t.Fatalf("TooLarge = %v (class %v), want a Rejected ErrTooLarge", err, Code(err))
	}
	for _, want := range []string{"orders", "2048", "1024"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not name %s", err, want)
		}
	}
}

func TestDisconnected(t *testing.T) {
	for _, err := range []error{
		&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED},
		fmt.Errorf("read: %w", syscall.ECONNRESET),
		fmt.Errorf("write: %w", syscall.EPIPE),
		fmt.Errorf("reading frame: %w", io.EOF),
		io.ErrUnexpectedEOF,
		net.ErrClosed,
	} {
		if !Disconnected(err) {
			t.Errorf("Disconnected(%v) = false", err)
		}
	}
	for _, err := range []error{nil, errors.New("message too large"), ErrNotStarted} {
		if Disconnected(err) {
			t.Errorf("Disconnected(%v) = true", err)
		}
	}
}
