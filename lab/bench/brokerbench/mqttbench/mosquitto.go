package mqttbench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// StartMosquitto runs a private Mosquitto on a free loopback port for the
// broker benchmark, configured so that a backlog of any size is kept
// (max_queued_messages 0: the stock limit of 1000 per session silently drops
// the rest) and without Nagle delays. It needs the mosquitto binary on PATH
// or in /usr/sbin; stop ends the process and removes its files.
func StartMosquitto(ctx context.Context) (addr string, stop func(), err error) {
	bin, err := exec.LookPath("mosquitto")
	if err != nil {
		if _, statErr := os.Stat("/usr/sbin/mosquitto"); statErr != nil {
			return "", nil, fmt.Errorf("mqtt bench: no mosquitto binary (give --url of a broker instead): %w", err)
		}
		bin = "/usr/sbin/mosquitto"
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	addr = ln.Addr().String()
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	dir, err := os.MkdirTemp("", "msgx-bench-mosquitto-")
	if err != nil {
		return "", nil, err
	}
	conf := filepath.Join(dir, "mosquitto.conf")
	body := fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous true\npersistence false\nmax_queued_messages 0\nset_tcp_nodelay true\n", port)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, err
	}
	cmd := exec.Command(bin, "-c", conf)
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, fmt.Errorf("mqtt bench: start mosquitto: %w", err)
	}
	stop = func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = os.RemoveAll(dir)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr)
		if err == nil {
			_ = c.Close()
			return addr, stop, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			stop()
			return "", nil, fmt.Errorf("mqtt bench: mosquitto did not listen on %s: %w", addr, err)
		}
		// Waiting for a child process to open its port: poll briefly.
		time.Sleep(20 * time.Millisecond)
	}
}
