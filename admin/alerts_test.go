package admin

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

// The alert rules in the repository are valid Prometheus rules, and every
// msgx metric they use is one this package or a component exports.
func TestAlertRules(t *testing.T) {
	const rules = "../deploy/alerts.yaml"
	b, err := os.ReadFile(rules)
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{
		// admin (collector.go)
		"msgx_stream_head_age_seconds": true, "msgx_stream_head_blocked_seconds": true, "msgx_mailbox_gap_open_seconds": true,
		"msgx_mailbox_gap_ids_skipped": true, "msgx_backfill_overdue": true, "msgx_relay_dead": true, "msgx_status_up": true,
		"msgx_relay_unserved_pending": true, "msgx_admin_auth_failures_total": true, "msgx_admin_refused_total": true,
		"msgx_outbox_blocked_keys": true, "msgx_outbox_blocked_key_waiting": true,
		// inbox, outbox and broker metrics
		"msgx_inbox_leader": true, "msgx_inbox_lease_superseded": true, "msgx_inbox_settled_total": true, "msgx_inbox_backfill_failures_total": true,
		"msgx_inbox_prepare_failures_total": true, "msgx_outbox_lag_seconds": true, "msgx_outbox_target_up": true, "msgx_broker_publish_errors_total": true,
		"msgx_outbox_wal_slot_invalidated": true, "msgx_outbox_wal_retained_bytes": true, "msgx_outbox_wal_holder": true, "msgx_outbox_wal_paused": true,
		// the mailbox poller
		"msgx_mailbox_anomalies_total": true, "msgx_mailbox_late_rows_total": true, "msgx_mailbox_scan_errors_total": true,
		"msgx_mailbox_unreadable_seconds": true,
		// the listeners
		"msgx_tls_certificate_expiry_timestamp_seconds": true, "msgx_tls_reloads_total": true, "msgx_ingress_refused_total": true,
		// the route-passport pipeline
		"route_passport_ingest_failure_total": true, "route_passport_consecutive_failures": true,
		"route_passport_oldest_unacknowledged_seconds": true,
		"route_passport_outbox_failed_total":           true,
	}
	for _, m := range regexp.MustCompile(`(msgx|route_passport)_[a-z_]+`).FindAllString(string(b), -1) {
		if !known[m] {
			t.Errorf("alert rules use %s, which nothing exports", m)
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (Debian package prometheus); the rules' syntax is not checked")
	}
	out, err := exec.Command(promtool, "check", "rules", rules).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

// MsgxAdminAuthFailures fires on a burst of wrong tokens and stays quiet on
// a few typos (promtool's rule unit test).
func TestAdminAuthAlert(t *testing.T) {
	promtoolTest(t, func(rules string) string {
		return `rule_files: ["` + rules + `"]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'msgx_admin_auth_failures_total{instance="a", via="api", reason="unknown_token"}'
        values: '0+10x15'
      - series: 'msgx_admin_auth_failures_total{instance="b", via="console", reason="unknown_token"}'
        values: '0 1 2 3 3 3 3 3 3 3 3 3 3 3 3 3'
    alert_rule_test:
      - eval_time: 10m
        alertname: MsgxAdminAuthFailures
        exp_alerts:
          - exp_labels: {severity: ticket, instance: a}
            exp_annotations:
              summary: "msgx a: 100 failed or throttled admin authentications in 10 minutes"
              description: "Someone is guessing admin tokens, or a script uses a revoked one. The WARN lines 'admin: authentication failed' name the client address and path. Runbook: docs/operations.md#admin-api-and-console"
`
	})
}

// MsgxOutboxKeyBlocked fires for a per-key target whose keys stay held by a
// DEAD event for 5 minutes, and not for one whose held key was resolved
// sooner.
func TestAlertKeyBlocked(t *testing.T) {
	promtoolTest(t, func(rules string) string {
		return `rule_files: [` + rules + `]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'msgx_outbox_blocked_keys{target="p",instance="a"}'
        values: '0 2x10'
      - series: 'msgx_outbox_blocked_keys{target="q",instance="a"}'
        values: '0 1 1 0x8'
    alert_rule_test:
      - eval_time: 4m
        alertname: MsgxOutboxKeyBlocked
        exp_alerts: []
      - eval_time: 7m
        alertname: MsgxOutboxKeyBlocked
        exp_alerts:
          - exp_labels: {severity: page, target: p}
            exp_annotations:
              summary: "Relay target p: 2 keys held by a DEAD event; their later events wait"
              description: "On a per-key target a dead event holds its key until it is replayed (sent first, then the waiting ones in order) or skipped. ` + "`msgx status`" + ` names the keys and events (msgx_outbox_blocked_key_waiting too). Runbook: docs/operations.md#a-key-held-by-a-dead-event"
`
	})
}

// promtoolTest runs promtool's rule unit test that test makes of the path
// of deploy/alerts.yaml.
func promtoolTest(t *testing.T, test func(rules string) string) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (Debian package prometheus)")
	}
	rules, err := filepath.Abs("../deploy/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "test.yaml")
	if err := os.WriteFile(path, []byte(test(rules)), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "test", "rules", path).CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}
