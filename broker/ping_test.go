package broker

import (
	"context"
	"errors"
	"testing"

	"github.com/msgx/msgx/broker/mem"
	"github.com/msgx/msgx/internal/testkit"
)

// Ping is the adapter's: the in-process broker answers while its server is
// open; an adapter without a ping says so; a broker not started is not
// pinged.
func TestPing(t *testing.T) {
	ctx := context.Background()
	srv := mem.NewServer()
	b := New("mem", mem.New(srv), WithLogger(testkit.Quiet()))
	if err := b.Ping(ctx); !errors.Is(err, ErrNotStarted) {
		t.Errorf("before Start: %v", err)
	}
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Ping(ctx); err != nil {
		t.Errorf("running: %v", err)
	}
	srv.Close()
	if err := b.Ping(ctx); !errors.Is(err, mem.ErrServerClosed) {
		t.Errorf("server closed: %v", err)
	}
	_ = b.Stop(ctx)

	h := New("hang", &hangDriver{}, WithLogger(testkit.Quiet()))
	if err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.Stop(ctx) }()
	if err := h.Ping(ctx); !errors.Is(err, ErrUnsupported) {
		t.Errorf("an adapter without a ping: %v", err)
	}
}
