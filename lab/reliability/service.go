package reliability

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Build compiles the msgx binary of the module at root into dir.
func Build(ctx context.Context, root, dir string, race bool) (string, error) {
	bin := dir + "/msgx"
	args := []string{"build", "-ldflags=-s -w", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.CommandContext(ctx, "go", append(args, "./cmd/msgx")...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %w\n%s", err, out)
	}
	return bin, nil
}

// Instance is one running msgx serve process.
type Instance struct {
	Name   string
	Admin  string
	Ingest string
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
	tail   []string // the last lines of its log, for errors at start
}

var listenRE = regexp.MustCompile(`"msg":"(admin|ingress) listening","addr":"([^"]+)"`)

// Launch starts `msgx serve` and waits until both listeners are up. Its
// log goes to logw, each line prefixed by the instance's name.
func Launch(ctx context.Context, name, bin, config string, env []string, logw io.Writer, logMu *sync.Mutex) (*Instance, error) {
	cmd := exec.Command(bin, "serve", "--config", config)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	in := &Instance{Name: name, cmd: cmd, exited: make(chan struct{})}
	addrs := make(chan [2]string, 4)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			logMu.Lock()
			fmt.Fprintf(logw, "%s %s\n", name, line)
			logMu.Unlock()
			if len(in.tail) == 20 {
				in.tail = in.tail[1:]
			}
			in.tail = append(in.tail, line)
			if m := listenRE.FindStringSubmatch(line); m != nil {
				select {
				case addrs <- [2]string{m[1], m[2]}:
				default:
				}
			}
		}
		in.err = cmd.Wait()
		close(in.exited)
	}()
	timer := time.NewTimer(90 * time.Second)
	defer timer.Stop()
	for in.Admin == "" || in.Ingest == "" {
		select {
		case a := <-addrs:
			if a[0] == "admin" {
				in.Admin = a[1]
			} else {
				in.Ingest = a[1]
			}
		case <-in.exited:
			return nil, fmt.Errorf("%s exited at start: %v\n%s", name, in.err, strings.Join(in.tail, "\n"))
		case <-timer.C:
			in.Kill()
			return nil, fmt.Errorf("%s did not listen within 90 s", name)
		case <-ctx.Done():
			in.Kill()
			return nil, ctx.Err()
		}
	}
	return in, nil
}

// Kill sends SIGKILL and waits for the process to be gone.
func (in *Instance) Kill() {
	_ = in.cmd.Process.Signal(syscall.SIGKILL)
	<-in.exited
}

// Alive reports whether the process still runs.
func (in *Instance) Alive() bool {
	select {
	case <-in.exited:
		return false
	default:
		return true
	}
}

// Stop sends SIGTERM and waits up to limit for a clean exit.
func (in *Instance) Stop(limit time.Duration) error {
	_ = in.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-in.exited:
		return in.err
	case <-time.After(limit):
		in.Kill()
		return fmt.Errorf("%s did not stop within %s of SIGTERM", in.Name, limit)
	}
}
