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

// TestErrorFeedCountsDrops: what does not fit the channel, and what is
// reported after Close, goes to the drop function and is counted.
func TestErrorFeedCountsDrops(t *testing.T) {
	var logged int
	f := NewErrorFeed(2, func(error) { logged++ })
	for range 5 {
		f.Report(errors.New("e"))
	}
	f.Close()
	f.Report(errors.New("after close"))
	if f.Dropped() != 4 || logged != 4 {
		t.Errorf("Dropped = %d, drop function called %d times; want 4 and 4", f.Dropped(), logged)
	}
}
