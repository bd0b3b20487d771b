package main

import (
	"strings"
	"testing"

	"github.com/msgx/msgx/app/config"
)

func TestFailpointsFromEnv(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	if fp, err := failpointsFromEnv(env(), config.Production); fp != nil || err != nil {
		t.Fatalf("no variable: %v %v, want nothing armed", fp, err)
	}
	fp, err := failpointsFromEnv(env(EnvFailpoints, "outbox-after-confirm=3,inbox-after-commit=10"), "development")
	if err != nil || fp.String() != "inbox-after-commit=10,outbox-after-confirm=3" {
		t.Fatalf("development: %v %v", fp, err)
	}
	if _, err := failpointsFromEnv(env(EnvFailpoints, "nowhere=1"), "development"); err == nil || !strings.Contains(err.Error(), EnvFailpoints) {
		t.Fatalf("unknown point: %v, want an error naming %s", err, EnvFailpoints)
	}
	if _, err := failpointsFromEnv(env(EnvFailpoints, "inbox-mid-batch=2"), config.Production); err == nil || !strings.Contains(err.Error(), EnvFailpointsInProduction) {
		t.Fatalf("production without the acknowledgement: %v, want a refusal naming %s", err, EnvFailpointsInProduction)
	}
	if fp, err := failpointsFromEnv(env(EnvFailpoints, "inbox-mid-batch=2", EnvFailpointsInProduction, "true"), config.Production); err != nil || fp == nil {
		t.Fatalf("production with the acknowledgement: %v %v", fp, err)
	}
}
