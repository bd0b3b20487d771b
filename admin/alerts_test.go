package admin

import (
	"os"
	"os/exec"
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
		"msgx_relay_unserved_pending": true,
		// inbox, outbox and broker metrics
		"msgx_inbox_leader": true, "msgx_inbox_lease_superseded": true, "msgx_inbox_settled_total": true, "msgx_inbox_backfill_failures_total": true,
		"msgx_inbox_prepare_failures_total": true, "msgx_outbox_lag_seconds": true, "msgx_outbox_target_up": true, "msgx_broker_publish_errors_total": true,
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
