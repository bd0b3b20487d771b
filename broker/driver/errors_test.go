package driver

import (
	"errors"
	"testing"
)

func TestErrorFeedNeverBlocks(t *testing.T) {
	var dropped []error
	f := NewErrorFeed(1, func(err error) { dropped = append(dropped, err) })
	a, b, c := errors.New("a"), errors.New("b"), errors.New("c")
	f.Report(a)
	f.Report(b) // buffer full: dropped, not blocked
	f.Close()
	f.Close()
	f.Report(c) // after close: dropped, no panic
	if got := <-f.C(); got != a {
		t.Fatalf("first error = %v", got)
	}
	if _, open := <-f.C(); open {
		t.Fatal("channel not closed")
	}
	if len(dropped) != 2 || dropped[0] != b || dropped[1] != c {
		t.Fatalf("dropped = %v", dropped)
	}
}
