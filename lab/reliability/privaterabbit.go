package reliability

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// rabbitScripts is where Debian keeps the server's own scripts; the ones on
// the PATH switch to the rabbitmq user, which would lose the environment
// that makes the node private.
const rabbitScripts = "/usr/lib/rabbitmq/bin"

// PrivateRabbit is a RabbitMQ node of the campaign's own: its own node name,
// AMQP and distribution ports, data, logs, configuration, plugin list and
// Erlang cookie (HOME) in a temporary directory, so that it can be killed
// and restarted without touching the machine's RabbitMQ.
type PrivateRabbit struct {
	dir, node string
	port      int
	env       []string
	// Start is how long the first start took until the node took AMQP
	// connections.
	Start time.Duration
}

// StartRabbit starts a node under dir.
func StartRabbit(ctx context.Context, dir string) (*PrivateRabbit, error) {
	if _, err := os.Stat(filepath.Join(rabbitScripts, "rabbitmq-server")); err != nil {
		return nil, fmt.Errorf("private RabbitMQ: no %s/rabbitmq-server: %w", rabbitScripts, err)
	}
	var rb [4]byte
	_, _ = crand.Read(rb[:])
	r := &PrivateRabbit{dir: dir, node: "msgxrel" + hex.EncodeToString(rb[:]) + "@localhost"}
	var err error
	if r.port, err = freePort(); err != nil {
		return nil, err
	}
	dist, err := freePort()
	if err != nil {
		return nil, err
	}
	files := map[string]string{
		// The machine's rabbitmq.conf and rabbitmq-env.conf name its own node
		// and port: the node reads files of its own instead.
		"rabbitmq.conf":     fmt.Sprintf("listeners.tcp.local = 127.0.0.1:%d\n", r.port),
		"rabbitmq-env.conf": "",
		"enabled_plugins":   "[].\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			return nil, err
		}
	}
	r.env = append(os.Environ(),
		"HOME="+dir, // the Erlang cookie
		"RABBITMQ_NODENAME="+r.node,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(r.port),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(dist),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		"RABBITMQ_PID_FILE="+filepath.Join(dir, "rabbit.pid"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(dir, "rabbitmq.conf"),
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(dir, "rabbitmq-env.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(dir, "advanced.config"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(dir, "enabled_plugins"),
		"ERL_EPMD_ADDRESS=127.0.0.1",
	)
	begin := time.Now()
	if err := r.start(ctx); err != nil {
		r.Stop()
		return nil, err
	}
	r.Start = time.Since(begin)
	return r, nil
}

// URL is the node's AMQP address (the default guest user, from loopback).
func (r *PrivateRabbit) URL() string {
	return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", r.port)
}

func (r *PrivateRabbit) start(ctx context.Context) error {
	// The output goes to a file, not a pipe: the detached VM could keep a
	// pipe open after the script returned.
	out, err := os.OpenFile(filepath.Join(r.dir, "start.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.CommandContext(ctx, filepath.Join(rabbitScripts, "rabbitmq-server"), "-detached")
	cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = r.env, r.dir, out, out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("private RabbitMQ: rabbitmq-server -detached: %w (see %s)", err, out.Name())
	}
	if err := waitFor(ctx, 2*time.Minute, func() bool {
		conn, err := amqp.DialConfig(r.URL(), amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
		if err != nil {
			return false
		}
		_ = conn.Close()
		return true
	}); err != nil {
		return fmt.Errorf("private RabbitMQ: the node did not take connections: %w (logs in %s)", err, filepath.Join(r.dir, "log"))
	}
	return nil
}

func (r *PrivateRabbit) pid() (int, error) {
	b, err := os.ReadFile(filepath.Join(r.dir, "rabbit.pid"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// kill sends SIGKILL to the node's VM and waits until it is gone.
func (r *PrivateRabbit) kill(ctx context.Context) error {
	pid, err := r.pid()
	if err != nil {
		return fmt.Errorf("private RabbitMQ: pid file: %w", err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("private RabbitMQ: kill: %w", err)
	}
	_ = os.Remove(filepath.Join(r.dir, "rabbit.pid"))
	return waitFor(ctx, 30*time.Second, func() bool { return syscall.Kill(pid, 0) != nil })
}

// Restart kills the node with SIGKILL and starts it again; it returns how
// long the node took from the kill until it took AMQP connections again.
func (r *PrivateRabbit) Restart(ctx context.Context) (time.Duration, error) {
	begin := time.Now()
	if err := r.kill(ctx); err != nil {
		return 0, err
	}
	if err := r.start(ctx); err != nil {
		return 0, err
	}
	return time.Since(begin), nil
}

// SyncMetadata has the node write its metadata log (queues, exchanges,
// bindings) to disk. RabbitMQ writes a declaration there without waiting for
// the disk, so a queue declared moments before a SIGKILL can be gone after
// the restart, even though the messages it confirmed were on disk.
func (r *PrivateRabbit) SyncMetadata(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, filepath.Join(rabbitScripts, "rabbitmqctl"), "-n", r.node, "eval", "mnesia:sync_log().")
	cmd.Env, cmd.Dir = r.env, r.dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("private RabbitMQ: sync the metadata log: %w: %s", err, out)
	}
	return nil
}

// Stop stops the node (rabbitmqctl stop, then SIGKILL if that did not
// end it) and removes its directory.
func (r *PrivateRabbit) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(rabbitScripts, "rabbitmqctl"), "-n", r.node, "stop")
	cmd.Env, cmd.Dir = r.env, r.dir
	_ = cmd.Run()
	if _, err := r.pid(); err == nil {
		_ = r.kill(ctx)
	}
	_ = os.RemoveAll(r.dir)
}
