package reliability

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/msgx/msgx/broker/rabbitmq/rabbittest"
)

// PrivateRabbit is a RabbitMQ node of the campaign's own (rabbittest), so
// that it can be killed and restarted without touching the machine's
// RabbitMQ.
type PrivateRabbit struct {
	node *rabbittest.Node
	// Start is how long the first start took until the node took AMQP
	// connections.
	Start time.Duration
}

// StartRabbit starts a node under dir.
func StartRabbit(ctx context.Context, dir string) (*PrivateRabbit, error) {
	node, err := rabbittest.Prepare(dir, "msgxrel", "")
	if err != nil {
		return nil, fmt.Errorf("private RabbitMQ: %w", err)
	}
	r := &PrivateRabbit{node: node}
	begin := time.Now()
	if err := r.start(ctx); err != nil {
		r.Stop()
		return nil, err
	}
	r.Start = time.Since(begin)
	return r, nil
}

// URL is the node's AMQP address (the default guest user, from loopback).
func (r *PrivateRabbit) URL() string { return r.node.URL() }

func (r *PrivateRabbit) start(ctx context.Context) error {
	// The output goes to a file, not a pipe: the detached VM could keep a
	// pipe open after the script returned.
	out, err := os.OpenFile(filepath.Join(r.node.Dir, "start.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := r.node.Command(ctx, "rabbitmq-server", "-detached")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("private RabbitMQ: rabbitmq-server -detached: %w (see %s)", err, out.Name())
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := r.node.WaitAMQP(ctx, nil); err != nil {
		return fmt.Errorf("private RabbitMQ: %w", err)
	}
	return nil
}

func (r *PrivateRabbit) pid() (int, error) {
	b, err := os.ReadFile(r.node.PIDFile())
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
	_ = os.Remove(r.node.PIDFile())
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
	cmd := r.node.Command(ctx, "rabbitmqctl", "-n", r.node.Name, "eval", "mnesia:sync_log().")
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
	cmd := r.node.Command(ctx, "rabbitmqctl", "-n", r.node.Name, "stop")
	_ = cmd.Run()
	if _, err := r.pid(); err == nil {
		_ = r.kill(ctx)
	}
	_ = os.RemoveAll(r.node.Dir)
}
