package app

import (
	"os/exec"
	"strings"
	"testing"
)

// goList is `go list -deps` of pkgs with the build tags given.
func goList(t *testing.T, tags string, pkgs ...string) []string {
	t.Helper()
	args := append([]string{"list", "-deps", "-tags", tags}, pkgs...)
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.Fields(string(out))
}

// The service sees the adapters only through the brokers registry: neither
// app nor its configuration imports an adapter or a broker client library
// (the command chooses the adapters a build has).
func TestImportsNoAdapter(t *testing.T) {
	forbidden := []string{
		"github.com/msgx/msgx/broker/kafka", "github.com/msgx/msgx/broker/rabbitmq", "github.com/msgx/msgx/broker/nats",
		"github.com/msgx/msgx/broker/mqtt", "github.com/msgx/msgx/broker/pulsar", "github.com/msgx/msgx/broker/mem",
		"github.com/twmb/franz-go/", "github.com/rabbitmq/amqp091-go", "github.com/nats-io/nats.go",
		"github.com/eclipse/paho.golang", "github.com/apache/pulsar-client-go",
	}
	for _, dep := range goList(t, "", "github.com/msgx/msgx/app", "github.com/msgx/msgx/app/config") {
		for _, f := range forbidden {
			if dep == f || strings.HasPrefix(dep, f+"/") || strings.HasSuffix(f, "/") && strings.HasPrefix(dep, f) {
				t.Errorf("app imports %s", dep)
			}
		}
	}
}
