package routepassport

import (
	"strings"
	"testing"
	"time"
)

func TestOptionsFromSettings(t *testing.T) {
	opts, err := OptionsFromSettings(map[string]string{"test-controller": "true", "group": "g", "input-topic": "in", "route-in-topic": "out"})
	if err != nil {
		t.Fatal(err)
	}
	c := defaults()
	for _, o := range opts {
		o(&c)
	}
	if !c.testController || c.group != "g" || c.inputTopic != "in" || c.inTopic != "out" ||
		c.dlqTopic != DeadLetterTopic || c.georefTopic != GeoreferenceTopic {
		t.Fatalf("config %+v", c)
	}

	_, err = OptionsFromSettings(map[string]string{"test-controller": "yes please", "input-topic": "", "grup": "g"})
	if err == nil {
		t.Fatal("bad settings accepted")
	}
	for _, want := range []string{"test-controller", "input-topic: empty", "grup: unknown setting"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

func TestStuckSettings(t *testing.T) {
	opts, err := OptionsFromSettings(map[string]string{"stuck-after": "90s", "stuck-after-failures": "3"})
	if err != nil {
		t.Fatal(err)
	}
	c := defaults()
	for _, o := range opts {
		o(&c)
	}
	if c.stuckAfter != 90*time.Second || c.stuckFailures != 3 {
		t.Fatalf("stuck-after %s, stuck-after-failures %d", c.stuckAfter, c.stuckFailures)
	}
	_, err = OptionsFromSettings(map[string]string{"stuck-after": "0s", "stuck-after-failures": "none"})
	for _, want := range []string{"stuck-after: \"0s\"", "stuck-after-failures: \"none\""} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %q", err, want)
		}
	}
}
