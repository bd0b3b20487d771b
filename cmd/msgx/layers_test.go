package main

import (
	"bufio"
	"bytes"
	"context"
	"os/exec"
	"path"
	"strings"
	"testing"
	"time"
)

// The checks below keep the product apart from the lab (docs/architecture.md,
// "Product and lab"): they read the module's import graph with go list.

const module = "github.com/msgx/msgx"

// isLab reports whether pkg is part of the lab: the benchmarks, the fault
// campaign and the two commands that run them.
func isLab(pkg string) bool {
	return pkg == module+"/lab" || strings.HasPrefix(pkg, module+"/lab/") ||
		pkg == module+"/cmd/msgx-bench" || pkg == module+"/cmd/msgx-reliability"
}

// goList runs go list with args and returns its output lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "go", append([]string{"list"}, args...)...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// TestBinaryLinksNoLab: the msgx binary links no lab package, no benchmark,
// no fake broker (kfake, pulsarfake) and none of msgx's test helpers.
func TestBinaryLinksNoLab(t *testing.T) {
	deps := goList(t, "-deps", module+"/cmd/msgx")
	if len(deps) < 100 {
		t.Fatalf("go list -deps printed %d packages: not the binary's graph", len(deps))
	}
	for _, p := range deps {
		last := path.Base(p)
		switch {
		case isLab(p):
			t.Errorf("the binary links the lab package %s", p)
		case strings.Contains(last, "bench"):
			t.Errorf("the binary links the benchmark package %s", p)
		case strings.HasSuffix(last, "fake"):
			t.Errorf("the binary links the fake %s", p)
		case strings.HasPrefix(p, module+"/") && strings.HasSuffix(last, "test"):
			t.Errorf("the binary links the test helper %s", p)
		}
	}
}

// TestProductImportsNoLab: no package outside the lab imports a lab package,
// not even in its tests, so the lab can move or go without touching the
// product.
func TestProductImportsNoLab(t *testing.T) {
	lines := goList(t, "-f", "{{.ImportPath}} {{join .Imports \" \"}} {{join .TestImports \" \"}} {{join .XTestImports \" \"}}", module+"/...")
	for _, l := range lines {
		f := strings.Fields(l)
		if isLab(f[0]) {
			continue
		}
		for _, imp := range f[1:] {
			if isLab(imp) {
				t.Errorf("%s imports the lab package %s", f[0], imp)
			}
		}
	}
}

// publicLeaves are the public packages that import no msgx package.
var publicLeaves = map[string]bool{module + "/clock": true, module + "/backoff": true, module + "/failpoint": true, module + "/buildinfo": true}

// TestInternalHoldsLeaves: a package under internal/ imports only the
// standard library, other modules, other internal/ packages and the public
// leaves (clock, backoff, failpoint, buildinfo: they import no msgx
// package), so every package of msgx may import it (the benchmarks, the
// demo and the test processors that imported inbox, outbox and the
// pipelines live elsewhere).
func TestInternalHoldsLeaves(t *testing.T) {
	for leaf := range publicLeaves {
		for _, l := range goList(t, "-f", "{{join .Imports \" \"}}", leaf) {
			for _, imp := range strings.Fields(l) {
				if strings.HasPrefix(imp, module+"/") {
					t.Errorf("%s imports %s: it must stay a leaf", leaf, imp)
				}
			}
		}
	}
	lines := goList(t, "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"/internal/...")
	for _, l := range lines {
		f := strings.Fields(l)
		for _, imp := range f[1:] {
			if !strings.HasPrefix(imp, module+"/") || strings.HasPrefix(imp, module+"/internal/") || publicLeaves[imp] {
				continue
			}
			t.Errorf("%s imports %s: internal/ holds leaves only", f[0], imp)
		}
	}
}
