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

func TestOffsetShiftsNowButNotWaits(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := NewFake(start)
	ahead := Offset{Base: f, D: 40 * time.Second}
	behind := Offset{Base: f, D: -40 * time.Second}
	if got := ahead.Now(); !got.Equal(start.Add(40 * time.Second)) {
		t.Fatalf("ahead.Now = %v", got)
	}
	if got := behind.Now(); !got.Equal(start.Add(-40 * time.Second)) {
		t.Fatalf("behind.Now = %v", got)
	}
	// A wait of 5 s lasts 5 s of the base clock, whatever the shift.
	a, b := ahead.NewTimer(5*time.Second), behind.After(5*time.Second)
	f.Advance(4 * time.Second)
	select {
	case <-a.C():
		t.Fatal("the shifted timer fired after 4 s of 5")
	case <-b:
		t.Fatal("the shifted After fired after 4 s of 5")
	default:
	}
	f.Advance(time.Second)
	for name, c := range map[string]<-chan time.Time{"timer": a.C(), "After": b} {
		select {
		case <-c:
		default:
			t.Fatalf("the shifted %s did not fire after 5 s", name)
		}
	}
	if got := ahead.Now().Sub(behind.Now()); got != 80*time.Second {
		t.Fatalf("the two shifted clocks are %s apart, want 80s", got)
	}
	c := ahead.NewTimer(time.Minute)
	if !c.Stop() || f.Waiters() != 0 {
		t.Fatalf("Stop of a shifted timer did not stop the base timer (%d waiters)", f.Waiters())
	}
}

func TestOffsetOfRealFollowsTheWallClock(t *testing.T) {
	o := Offset{Base: Real{}, D: -time.Hour}
	before := time.Now()
	got := o.Now()
	after := time.Now()
	if got.Before(before.Add(-time.Hour)) || got.After(after.Add(-time.Hour)) {
		t.Fatalf("Offset{Real, -1h}.Now = %v, not within [%v, %v] shifted by -1h", got, before, after)
	}
	if !Paced(o) || !Paced(Real{}) || Paced(NewFake(before)) || Paced(Offset{Base: NewFake(before)}) {
		t.Fatal("Paced: Real and an Offset of Real run at the wall clock's pace, a Fake does not")
	}
}
