package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// This build registers every adapter.
func TestAdapters(t *testing.T) {
	want := []string{"kafka", "mem", "mqtt", "nats", "pulsar", "rabbitmq"}
	if got := adapters().Kinds(); !slices.Equal(got, want) {
		t.Errorf("kinds %v, want %v", got, want)
	}
}

// A build with -tags nopulsar links no Pulsar package, nor the Kubernetes
// and AthenZ libraries the Pulsar client brings.
func TestNoPulsarBuild(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-tags", "nopulsar", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.Contains(dep, "pulsar") || strings.HasPrefix(dep, "k8s.io/") || strings.Contains(dep, "AthenZ") {
			t.Errorf("the nopulsar build links %s", dep)
		}
	}
}
