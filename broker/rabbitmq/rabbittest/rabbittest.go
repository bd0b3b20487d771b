// Package rabbittest runs private RabbitMQ nodes: each with its own node
// name, AMQP and distribution ports, data, logs, configuration, plugin list
// and Erlang cookie in a directory of its own, so that a test can give it a
// TLS listener, or kill and restart it, without touching the machine's
// RabbitMQ. The adapter's TLS tests and the fault campaign start theirs
// with it.
package rabbittest

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Scripts is where Debian keeps the server's own scripts; the ones on the
// PATH switch to the rabbitmq user, which would lose the environment that
// makes the node private.
const Scripts = "/usr/lib/rabbitmq/bin"

// Node is a private node laid out in its directory; Command runs the
// server's scripts as that node.
type Node struct {
	Dir  string
	Name string // the Erlang node name, name@localhost
	// Port is the AMQP listener's, on 127.0.0.1, without TLS.
	Port int
	env  []string
}

// Prepare lays out a private node under dir: a node name made of prefix and
// random letters, free AMQP and distribution ports, and its files:
// rabbitmq.conf (the AMQP listener, then conf's lines), an empty
// rabbitmq-env.conf (the machine's names its own node and port) and the
// enabled plugins.
func Prepare(dir, prefix, conf string, plugins ...string) (*Node, error) {
	if _, err := os.Stat(filepath.Join(Scripts, "rabbitmq-server")); err != nil {
		return nil, fmt.Errorf("rabbittest: no private RabbitMQ node: %w", err)
	}
	var rb [4]byte
	_, _ = crand.Read(rb[:])
	n := &Node{Dir: dir, Name: prefix + hex.EncodeToString(rb[:]) + "@localhost"}
	var dist int
	var err error
	if n.Port, err = freePort(); err != nil {
		return nil, err
	}
	if dist, err = freePort(); err != nil {
		return nil, err
	}
	files := map[string]string{
		"rabbitmq.conf":     fmt.Sprintf("listeners.tcp.local = 127.0.0.1:%d\n", n.Port) + conf,
		"rabbitmq-env.conf": "",
		"enabled_plugins":   "[" + strings.Join(plugins, ",") + "].\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			return nil, fmt.Errorf("rabbittest: %w", err)
		}
	}
	n.env = append(os.Environ(),
		"HOME="+dir, // the Erlang cookie
		"RABBITMQ_NODENAME="+n.Name,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(n.Port),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(dist),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		"RABBITMQ_PID_FILE="+n.PIDFile(),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(dir, "rabbitmq.conf"),
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(dir, "rabbitmq-env.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(dir, "advanced.config"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(dir, "enabled_plugins"),
		"ERL_EPMD_ADDRESS=127.0.0.1",
	)
	return n, nil
}

// Command is one of the server's scripts (rabbitmq-server, rabbitmqctl) run
// as this node, in its directory.
func (n *Node) Command(ctx context.Context, script string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(Scripts, script), args...)
	cmd.Env, cmd.Dir = n.env, n.Dir
	return cmd
}

// PIDFile is where the node writes its Erlang VM's pid.
func (n *Node) PIDFile() string { return filepath.Join(n.Dir, "rabbit.pid") }

// URL is the node's AMQP address (the default guest user, from loopback).
func (n *Node) URL() string { return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", n.Port) }

// WaitAMQP waits until the node takes AMQP connections: until ctx ends, or
// exited (when not nil) is closed because the server's process ended.
func (n *Node) WaitAMQP(ctx context.Context, exited <-chan struct{}) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		conn, err := amqp.DialConfig(n.URL(), amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
		if err == nil {
			_ = conn.Close()
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("rabbittest: the node ended before it took connections (logs in %s)", filepath.Join(n.Dir, "log"))
		case <-ctx.Done():
			return fmt.Errorf("rabbittest: the node takes no connections (logs in %s): %w: %w", filepath.Join(n.Dir, "log"), ctx.Err(), err)
		case <-tick.C:
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("rabbittest: a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
