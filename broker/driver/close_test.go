package driver

import (
	"context"
	"errors"
	"testing"
)

type closer struct {
	closed bool
	err    error
}

func (c *closer) Close(context.Context) error { c.closed = true; return c.err }

func TestCloseAllClosesEveryOneAndJoinsErrors(t *testing.T) {
	a, b, c := &closer{err: errors.New("a")}, &closer{}, &closer{err: errors.New("c")}
	err := CloseAll(context.Background(), []*closer{a, b, c})
	if !a.closed || !b.closed || !c.closed {
		t.Fatal("a subscription was left open after another's failure")
	}
	if err == nil || !errors.Is(err, a.err) || !errors.Is(err, c.err) {
		t.Fatalf("CloseAll = %v, want both failures", err)
	}
	if err := CloseAll(context.Background(), []*closer{b}); err != nil {
		t.Fatalf("CloseAll = %v", err)
	}
}
