// Package buildinfo says what a binary knows of its own build: the module
// version, the VCS revision it was built from and whether the tree had
// uncommitted changes, when, and with which Go. The Go toolchain stamps all
// of it (runtime/debug.ReadBuildInfo); a release build may set the version
// with -ldflags "-X main.version=v1.2.3", which wins over the stamp.
package buildinfo

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// Info is a binary's build.
type Info struct {
	Version   string   `json:"version"`  // the module version, "(devel)" when unknown
	Revision  string   `json:"revision"` // the VCS revision, "" when not built from a checkout
	Modified  bool     `json:"modified"` // the checkout had uncommitted changes
	Time      string   `json:"time"`     // the revision's commit time (RFC 3339), "" when unknown
	GoVersion string   `json:"go"`
	Platform  string   `json:"platform"` // GOOS/GOARCH
	Adapters  []string `json:"adapters"` // the broker adapters compiled in
}

// Read returns the running binary's build. version, when not "" or "dev",
// is the release version set at link time.
func Read(version string, adapters []string) Info {
	in := Info{Version: "(devel)", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH, Adapters: adapters}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			in.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				in.Revision = s.Value
			case "vcs.modified":
				in.Modified = s.Value == "true"
			case "vcs.time":
				in.Time = s.Value
			}
		}
	}
	if version != "" && version != "dev" {
		in.Version = version
	}
	return in
}

// Short is the revision's first 12 characters, "unknown" without one.
func (in Info) Short() string {
	if in.Revision == "" {
		return "unknown"
	}
	return in.Revision[:min(12, len(in.Revision))]
}

// Write prints in as `msgx version` does: one line of name and version,
// then a line per fact.
func (in Info) Write(w io.Writer) error {
	adapters := strings.Join(in.Adapters, ", ")
	if adapters == "" {
		adapters = "none"
	}
	_, err := fmt.Fprintf(w, "msgx %s\nrevision  %s\nmodified  %t\ncommitted %s\ngo        %s\nplatform  %s\nadapters  %s\n",
		in.Version, orUnknown(in.Revision), in.Modified, orUnknown(in.Time), in.GoVersion, in.Platform, adapters)
	return err
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
