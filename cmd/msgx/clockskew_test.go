package main

import (
	"strings"
	"testing"
	"time"

	"github.com/msgx/msgx/app/config"
	"github.com/msgx/msgx/clock"
)

func TestClockFromEnv(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	if c, skew, err := clockFromEnv(env(), config.Production); err != nil || skew != 0 || c != (clock.Real{}) {
		t.Fatalf("no variable: %v %s %v, want the wall clock", c, skew, err)
	}
	for raw, want := range map[string]time.Duration{"+40s": 40 * time.Second, "-1m30s": -90 * time.Second, " 2h ": 2 * time.Hour} {
		c, skew, err := clockFromEnv(env(EnvClockSkew, raw), "development")
		if err != nil || skew != want {
			t.Fatalf("%q: %s %v, want %s", raw, skew, err, want)
		}
		if got := time.Until(c.Now()); (got - want).Abs() > time.Second {
			t.Fatalf("%q: the clock is %s off the wall clock, want %s", raw, got, want)
		}
	}
	for raw, msg := range map[string]string{"40": "not a duration", "soon": "not a duration", "25h": "beyond the limit", "-25h": "beyond the limit"} {
		if _, _, err := clockFromEnv(env(EnvClockSkew, raw), "development"); err == nil || !strings.Contains(err.Error(), msg) {
			t.Fatalf("%q: %v, want an error saying %q", raw, err, msg)
		}
	}
	if _, _, err := clockFromEnv(env(EnvClockSkew, "+40s"), config.Production); err == nil || !strings.Contains(err.Error(), EnvClockSkewInProduction) {
		t.Fatalf("production without the acknowledgement: %v, want a refusal naming %s", err, EnvClockSkewInProduction)
	}
	if _, skew, err := clockFromEnv(env(EnvClockSkew, "+40s", EnvClockSkewInProduction, "true"), config.Production); err != nil || skew != 40*time.Second {
		t.Fatalf("production with the acknowledgement: %s %v", skew, err)
	}
}
