package brokertest

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/broker/driver"
)

// FreePort is a TCP port on 127.0.0.1 nothing listens on right now.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Server starts a broker server of the test's own (a private mosquitto or
// nats-server on a free port, with a configuration the test wrote), its
// output in dir/server.log, waits until addr takes TCP connections, and
// kills it at the end of the test.
func Server(t testing.TB, dir, addr, bin string, args ...string) {
	t.Helper()
	if _, err := exec.LookPath(bin); err != nil {
		t.Fatalf("%s is not installed: %v", bin, err)
	}
	logFile, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	var waitErr error
	exited := make(chan struct{})
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		_ = logFile.Close()
	})
	ctx, cancel := context.WithTimeout(context.Background(), timeout())
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr); err == nil {
			_ = c.Close()
			return
		}
		select {
		case <-exited:
			out, _ := os.ReadFile(logFile.Name())
			t.Fatalf("%s exited (%v) before it listened on %s:\n%s", bin, waitErr, addr, out)
		case <-ctx.Done():
			out, _ := os.ReadFile(logFile.Name())
			t.Fatalf("%s does not listen on %s after %s:\n%s", bin, addr, timeout(), out)
		case <-tick.C:
		}
	}
}

// Addr is 127.0.0.1:port.
func Addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// Subdir makes the directory parent/name (private to its owner) for a
// private server's files.
func Subdir(t testing.TB, parent, name string) string {
	t.Helper()
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

// StartRefused checks that d does not start (within 30 s) and that the
// error says one of the |-separated words of want, in any case: TLS 1.3
// may report a refused client certificate as a reset connection, so a test
// names both.
func StartRefused(t testing.TB, d driver.Broker, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := d.Start(ctx)
	if err == nil {
		_ = d.Close(ctx)
		t.Fatal("started")
	}
	if !slices.ContainsFunc(strings.Split(want, "|"), func(w string) bool { return strings.Contains(strings.ToLower(err.Error()), w) }) {
		t.Errorf("start failed with %v, want an error saying %q", err, want)
	}
}
