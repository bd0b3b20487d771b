package sis

import (
	"strings"
	"testing"
	"time"
)

func TestConfigFromSettings(t *testing.T) {
	cfg, err := ConfigFromSettings(map[string]string{
		"timezone": "Europe/Moscow", "ignore": "LDM, REGN/UPD,", "request-guard": "true",
		"msg-topic": "m", "schd-topic": "s", "max-bytes": "1024", "ref-topic": "r", "request-skew": "30s",
		"identity.include-day-boundary": "true",
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Location.String() != "Europe/Moscow" || !cfg.RequestGuard || cfg.MsgTopic != "m" || cfg.SchdTopic != "s" || cfg.MaxBytes != 1024 ||
		cfg.RefTopic != "r" || cfg.RequestSkew != 30*time.Second || !cfg.IncludeDayBoundary {
		t.Fatalf("config %+v", cfg)
	}
	if strings.Join(cfg.Ignore, "|") != "LDM|REGN/UPD" {
		t.Fatalf("ignore %q", cfg.Ignore)
	}

	if cfg, err := ConfigFromSettings(map[string]string{"ignore": ""}); err != nil || cfg.Ignore == nil || len(cfg.Ignore) != 0 {
		t.Fatalf("an empty ignore list must ignore nothing: %#v, %v", cfg.Ignore, err)
	}
	if cfg, err := ConfigFromSettings(nil); err != nil || cfg.Ignore != nil {
		t.Fatalf("no settings must keep the defaults: %#v, %v", cfg, err)
	}

	_, err = ConfigFromSettings(map[string]string{"timezone": "Mars/Olympus", "request-guard": "maybe", "max-bytes": "-1", "locaton": "x",
		"identity.include-day-boundary": "yes", "request-skew": "-1s"})
	if err == nil {
		t.Fatal("bad settings accepted")
	}
	for _, want := range []string{"timezone", "request-guard", "max-bytes", "locaton: unknown setting", "identity.include-day-boundary", "request-skew"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}
