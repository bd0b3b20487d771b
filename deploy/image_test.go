package deploy_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// TestImage builds the image with deploy/container/build.sh and checks what
// is in it without running it (containers cannot run everywhere the tests
// do): the entrypoint, user, ports, volume and OCI labels; the files (a
// static binary, the CA bundle, a non-root user owning only the data
// directory); and the binary itself, taken out of the image and run here:
// `version` names the labelled revision and `demo` runs the SIS pipeline end
// to end.
func TestImage(t *testing.T) {
	if _, err := exec.LookPath("podman"); err != nil {
		t.Fatal("podman is needed to build the image (Debian: apt-get install podman)")
	}
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	tag := "localhost/msgx-test:" + hex.EncodeToString(rb[:])
	version := "v0.0.0-test." + hex.EncodeToString(rb[:])
	build := exec.Command("container/build.sh", tag)
	build.Env = append(os.Environ(), "MSGX_VERSION="+version)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build.sh: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("podman", "rmi", "-f", tag).Run() })
	dir := t.TempDir()
	archive := filepath.Join(dir, "image.tar")
	if out, err := exec.Command("podman", "save", "--format", "oci-archive", "-o", archive, tag).CombinedOutput(); err != nil {
		t.Fatalf("podman save: %v\n%s", err, out)
	}
	img := readImage(t, archive)

	c := img.config.Config
	if want := []string{"/usr/local/bin/msgx"}; !equal(c.Entrypoint, want) || !equal(c.Cmd, []string{"serve"}) {
		t.Errorf("entrypoint %q, cmd %q", c.Entrypoint, c.Cmd)
	}
	if c.User != "65532:65532" || c.WorkingDir != "/var/lib/msgx" {
		t.Errorf("user %q, working directory %q: want a non-root user in the data directory", c.User, c.WorkingDir)
	}
	for _, p := range []string{"8080/tcp", "8081/tcp"} {
		if _, ok := c.ExposedPorts[p]; !ok {
			t.Errorf("port %s not exposed: %v", p, c.ExposedPorts)
		}
	}
	if _, ok := c.Volumes["/var/lib/msgx"]; !ok {
		t.Errorf("no volume for the data directory: %v", c.Volumes)
	}
	revision := strings.TrimSpace(gitOut(t, "rev-parse", "HEAD"))
	for k, want := range map[string]string{ocispec.AnnotationVersion: version, ocispec.AnnotationRevision: revision,
		ocispec.AnnotationTitle: "msgx", ocispec.AnnotationLicenses: "Apache-2.0", ocispec.AnnotationSource: "https://github.com/msgx/msgx"} {
		if got := c.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	if c.Labels[ocispec.AnnotationCreated] == "" {
		t.Errorf("no %s label", ocispec.AnnotationCreated)
	}

	bin, ok := img.files["usr/local/bin/msgx"]
	if !ok || bin.Mode&0o111 == 0 || bin.Uid != 0 {
		t.Fatalf("the binary: %+v", bin)
	}
	if f, ok := img.files["etc/ssl/certs/ca-certificates.crt"]; !ok || f.Size == 0 {
		t.Error("no CA bundle: TLS to brokers and databases would fail")
	}
	if f, ok := img.files["var/lib/msgx"]; !ok || f.Uid != 65532 || f.Typeflag != tar.TypeDir {
		t.Errorf("the data directory must belong to the service's user: %+v", f)
	}
	if !strings.Contains(string(img.content["etc/passwd"]), "msgx:x:65532:65532:") {
		t.Errorf("no msgx user in /etc/passwd:\n%s", img.content["etc/passwd"])
	}
	for name, f := range img.files {
		if f.Uid == 65532 && !strings.HasPrefix(name, "var/lib/msgx") {
			t.Errorf("%s belongs to the service's user: only the data directory may", name)
		}
	}

	// The release binary's budget: at most 50 MB with every adapter.
	if bin.Size > maxRelease {
		t.Errorf("the binary is %d bytes: over the %d of its budget (see docs/operations.md, Builds)", bin.Size, maxRelease)
	}
	t.Logf("release binary: %d bytes", bin.Size)

	exe := filepath.Join(dir, "msgx")
	if err := os.WriteFile(exe, img.content["usr/local/bin/msgx"], 0o755); err != nil {
		t.Fatal(err)
	}
	if interp := interpreter(t, exe); interp != "" {
		t.Errorf("the binary needs the dynamic loader %s: the image has none (build it with CGO_ENABLED=0)", interp)
	}
	out, err := exec.Command(exe, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "msgx "+version+"\n") || !strings.Contains(string(out), "revision  "+revision) {
		t.Errorf("msgx version in the image: %v\n%s", err, out)
	}
	if deps, err := exec.Command("go", "list", "-deps", "../cmd/msgx").Output(); err != nil || !strings.Contains(string(deps), "\ntime/tzdata\n") {
		t.Errorf("the binary must carry the time zone database (time/tzdata): the image has none (%v)", err)
	}
	demo := exec.Command(exe, "demo")
	demo.Dir = t.TempDir()
	if out, err := demo.CombinedOutput(); err != nil || !strings.Contains(string(out), "dead letters: none") {
		t.Errorf("msgx demo in the image: %v\n%s", err, out)
	}
}

// image is what TestImage reads of an OCI archive: the config and the
// files of its layers, in order (a later layer's file replaces an earlier).
type image struct {
	config  ocispec.Image
	files   map[string]*tar.Header
	content map[string][]byte
}

func readImage(t *testing.T, archive string) *image {
	t.Helper()
	blobs := map[string][]byte{}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			blobs[h.Name] = b
		}
	}
	blob := func(d ocispec.Descriptor) []byte {
		b, ok := blobs["blobs/"+d.Digest.Algorithm().String()+"/"+d.Digest.Encoded()]
		if !ok {
			t.Fatalf("no blob %s in the archive", d.Digest)
		}
		return b
	}
	var index ocispec.Index
	mustJSON(t, blobs["index.json"], &index)
	if len(index.Manifests) != 1 {
		t.Fatalf("%d manifests in the archive", len(index.Manifests))
	}
	var m ocispec.Manifest
	mustJSON(t, blob(index.Manifests[0]), &m)
	img := &image{files: map[string]*tar.Header{}, content: map[string][]byte{}}
	mustJSON(t, blob(m.Config), &img.config)
	for _, l := range m.Layers {
		var r io.Reader = strings.NewReader(string(blob(l)))
		if strings.Contains(l.MediaType, "gzip") {
			zr, err := gzip.NewReader(r)
			if err != nil {
				t.Fatal(err)
			}
			r = zr
		}
		lr := tar.NewReader(r)
		for {
			h, err := lr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(fmt.Errorf("layer %s: %w", l.Digest, err))
			}
			name := strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")
			img.files[name] = h
			if h.Typeflag == tar.TypeReg {
				b, err := io.ReadAll(lr)
				if err != nil {
					t.Fatal(err)
				}
				img.content[name] = b
			}
		}
	}
	return img
}

// interpreter is the dynamic loader an ELF executable asks for, "" for a
// static one.
func interpreter(t *testing.T, path string) string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, _ := io.ReadAll(p.Open())
			return strings.TrimRight(string(b), "\x00")
		}
	}
	return ""
}

func mustJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

func equal(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") }

func gitOut(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", args...).Output()
	if err != nil {
		t.Fatalf("git %v: %v", args, err)
	}
	return string(out)
}

// Release binaries' budgets, in bytes, for build.sh's flags (CGO_ENABLED=0,
// -trimpath, -tags grpcnotrace, -ldflags "-s -w"): a plain go build carries
// DWARF too, about a third more.
const (
	maxRelease  = 50_000_000
	maxNoPulsar = 35_000_000
)

// TestBuildWithoutPulsar builds the binary as build.sh does with
// MSGX_BUILD_TAGS=nopulsar: it stays in its budget (cmd/msgx's
// TestNoPulsarBuild checks that it links no Pulsar client). It also keeps the
// linker able to drop unused methods: a reachable reflective method call
// (text/template's or html/template's Execute, reflect.Value.MethodByName with
// a name not known at build time) makes it keep every exported method of
// every type, about 5 MB of this binary.
func TestBuildWithoutPulsar(t *testing.T) {
	exe := filepath.Join(t.TempDir(), "msgx")
	// -dumpdep writes the linker's reachability graph to stderr; the binary
	// is the same.
	build := exec.Command("go", "build", "-trimpath", "-tags", "nopulsar,grpcnotrace", "-ldflags", "-s -w -dumpdep", "-o", exe, "../cmd/msgx")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	var graph bytes.Buffer
	build.Stderr = &graph
	if err := build.Run(); err != nil {
		t.Fatalf("go build: %v\n%s", err, tail(graph.String(), 4000))
	}
	if chain := reflectMethodChain(graph.String()); chain != nil {
		t.Errorf("the build reaches a reflective method call, so the linker keeps every exported method; reached by:\n  %s",
			strings.Join(chain, "\n  <- "))
	}
	st, err := os.Stat(exe)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() > maxNoPulsar {
		t.Errorf("the build without Pulsar is %d bytes: over its %d (see docs/operations.md, Builds)", st.Size(), maxNoPulsar)
	}
	t.Logf("release binary without Pulsar: %d bytes", st.Size())
}

// reflectMethodChain finds, in the linker's -dumpdep graph ("caller ->
// callee" lines, attributes in <>), a function marked <ReflectMethod> and
// the callers that reach it from the program's entry points, nearest first;
// nil when there is none.
func reflectMethodChain(graph string) []string {
	callers := map[string][]string{}
	var marked string
	for line := range strings.Lines(graph) {
		from, to, ok := strings.Cut(strings.TrimSpace(line), " -> ")
		if !ok {
			continue
		}
		for _, node := range []string{from, to} {
			if marked == "" && strings.Contains(node, "<ReflectMethod>") {
				marked = node
			}
		}
		from, to = symbolOf(from), symbolOf(to)
		callers[to] = append(callers[to], from)
	}
	if marked == "" {
		return nil
	}
	// Walk back to main or a package initialiser, breadth first.
	start := symbolOf(marked)
	prev := map[string]string{start: ""}
	queue := []string{start}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		if n == "main.main" || strings.HasSuffix(n, "..inittask") {
			var chain []string
			for ; n != ""; n = prev[n] {
				chain = append([]string{n}, chain...)
			}
			return chain
		}
		for _, c := range callers[n] {
			if _, seen := prev[c]; !seen {
				prev[c] = n
				queue = append(queue, c)
			}
		}
	}
	return []string{start}
}

// symbolOf is a -dumpdep node without its attributes.
func symbolOf(node string) string {
	if i := strings.Index(node, " <"); i >= 0 {
		node = node[:i]
	}
	return strings.TrimSpace(node)
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
