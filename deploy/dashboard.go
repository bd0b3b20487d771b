package deploy

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// dashboardJSON is the Grafana dashboard (grafana/msgx.json).
//
//go:embed grafana/msgx.json
var dashboardJSON []byte

// Query is one query of the dashboard: its PromQL, the metrics it reads and
// the labels it groups by or shows.
type Query struct {
	Panel   string
	Expr    string
	Metrics []string
	Labels  []string
}

var (
	metricRE = regexp.MustCompile(`\b(msgx|route_passport)_[a-z_]+`)
	byRE     = regexp.MustCompile(`by \(([^)]*)\)`)
	legendRE = regexp.MustCompile(`\{\{\s*([a-z_]+)\s*\}\}`)
)

// Dashboard returns the queries of the Grafana dashboard, for the tests
// that check them against what a running service exports.
func Dashboard() ([]Query, error) {
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr   string `json:"expr"`
				Legend string `json:"legendFormat"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(dashboardJSON, &d); err != nil {
		return nil, fmt.Errorf("deploy: the dashboard: %w", err)
	}
	var out []Query
	for _, p := range d.Panels {
		for _, t := range p.Targets {
			q := Query{Panel: p.Title, Expr: t.Expr, Metrics: metricRE.FindAllString(t.Expr, -1)}
			for _, m := range byRE.FindAllStringSubmatch(t.Expr, -1) {
				for _, l := range strings.Split(m[1], ",") {
					q.Labels = append(q.Labels, strings.TrimSpace(l))
				}
			}
			for _, m := range legendRE.FindAllStringSubmatch(t.Legend, -1) {
				q.Labels = append(q.Labels, m[1])
			}
			out = append(out, q)
		}
	}
	return out, nil
}

// CheckExposition lists what of the queries' metrics and labels is not in
// a /metrics body: a metric with no series, a label no series of it has.
// The label instance is the scraper's, not the service's. A histogram's
// series are its _bucket, _sum and _count.
func CheckExposition(qs []Query, body string, skip func(metric string) bool) []string {
	var missing []string
	for _, q := range qs {
		for _, m := range q.Metrics {
			if skip != nil && skip(m) {
				continue
			}
			lines := seriesOf(body, strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_sum"), "_count"))
			if len(lines) == 0 {
				missing = append(missing, fmt.Sprintf("%s (panel %q): no series", m, q.Panel))
				continue
			}
			for _, l := range q.Labels {
				if l == "instance" {
					continue
				}
				if !strings.Contains(strings.Join(lines, "\n"), l+`="`) {
					missing = append(missing, fmt.Sprintf("%s (panel %q): no label %s", m, q.Panel, l))
				}
			}
		}
	}
	return missing
}

// seriesOf is the exposition lines of the series of metric (and of its
// histogram parts).
func seriesOf(body, metric string) []string {
	var out []string
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		switch name {
		case metric, metric + "_bucket", metric + "_sum", metric + "_count":
			out = append(out, line)
		}
	}
	return out
}
