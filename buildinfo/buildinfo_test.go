package buildinfo_test

import (
	"runtime"
	"strings"
	"testing"

	"github.com/msgx/msgx/buildinfo"
)

func TestRead(t *testing.T) {
	in := buildinfo.Read("dev", []string{"kafka", "mem"})
	if in.Version == "" || in.GoVersion != runtime.Version() || in.Platform != runtime.GOOS+"/"+runtime.GOARCH {
		t.Fatalf("build info: %+v", in)
	}
	if got := buildinfo.Read("v1.2.3", nil).Version; got != "v1.2.3" {
		t.Fatalf("a version set at link time: %q", got)
	}
	var b strings.Builder
	if err := in.Write(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"msgx " + in.Version + "\n", "go        " + runtime.Version(), "adapters  kafka, mem\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("version output lacks %q:\n%s", want, b.String())
		}
	}
	if s := (buildinfo.Info{Revision: "0123456789abcdef"}).Short(); s != "0123456789ab" {
		t.Errorf("short revision %q", s)
	}
}
