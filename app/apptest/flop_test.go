package apptest_test

import (
	"strconv"
	"testing"

	"github.com/msgx/msgx/app/apptest"
)

func TestMessagesDecode(t *testing.T) {
	msgs, err := apptest.Messages(500, 7, 100)
	if err != nil {
		t.Fatal(err)
	}
	fx, _ := apptest.FLOPs()
	if len(fx) != 71 {
		t.Fatalf("%d FLOP fixtures, want 71", len(fx))
	}
	seen := map[string]bool{}
	for i, m := range msgs {
		d, err := apptest.DecodeFlop(m)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		f := d.Value
		if f.SEQN != strconv.Itoa(101+i) || f.FLID != strconv.Itoa(900000+i%7) || f.TYPE != "FLOP" || f.SNDR == "" {
			t.Fatalf("message %d decoded as %+v", i, f)
		}
		if seen[d.Identity] {
			t.Fatalf("identity %s repeats", d.Identity)
		}
		seen[d.Identity] = true
	}
	if _, err := apptest.DecodeFlop([]byte("not xml <")); err == nil {
		t.Fatal("garbage decoded")
	}
}
