package clock

import (
	"testing"
	"time"
)

func TestFakeFiresDueTimersOnly(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := NewFake(start)
	a := f.After(time.Second)
	b := f.NewTimer(3 * time.Second)
	c := f.NewTimer(5 * time.Second)
	if !c.Stop() {
		t.Fatal("Stop of a pending timer returned false")
	}
	if f.Waiters() != 2 {
		t.Fatalf("waiters = %d, want 2", f.Waiters())
	}
	f.Advance(2 * time.Second)
	select {
	case at := <-a:
		if !at.Equal(start.Add(2 * time.Second)) {
			t.Fatalf("fired with %v", at)
		}
	default:
		t.Fatal("1s timer did not fire after 2s")
	}
	select {
	case <-b.C():
		t.Fatal("3s timer fired after 2s")
	default:
	}
	f.Set(start.Add(10 * time.Second))
	select {
	case <-b.C():
	default:
		t.Fatal("3s timer did not fire after 10s")
	}
	select {
	case <-c.C():
		t.Fatal("stopped timer fired")
	default:
	}
	if b.Stop() {
		t.Fatal("Stop of a fired timer returned true")
	}
	if got := f.Now(); !got.Equal(start.Add(10 * time.Second)) {
		t.Fatalf("Now = %v", got)
	}
}

func TestFakeZeroDurationFiresAtOnce(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	select {
	case <-f.After(0):
	default:
		t.Fatal("After(0) did not fire at once")
	}
}

func TestWaitForWaiters(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	done := make(chan struct{})
	go func() { <-f.After(time.Minute) }()
	if !f.WaitForWaiters(done, 1) {
		t.Fatal("WaitForWaiters gave up")
	}
	close(done)
	if f.WaitForWaiters(done, 5) {
		t.Fatal("WaitForWaiters reported 5 waiters that do not exist")
	}
	f.Advance(time.Minute)
}
