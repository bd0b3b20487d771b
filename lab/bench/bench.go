// Package bench holds what every `msgx-bench` workload shares: the RESULT line
// format of the benchmark method, latency summaries and the fresh PostgreSQL
// schema a database workload runs in.
package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Result is one measured variant of a workload.
type Result struct {
	Peer     string // "msgx" or the peer's name
	Workload string
	Variant  string // e.g. "port", "raw"; empty when the run has one variant
	Mode     string // burndown | live
	N        int
	Elapsed  time.Duration
	// Latencies, when measured, are summarised as p50/p99.
	Latencies []time.Duration
	// Warmup and WarmupLatencies (live runs): the first part of the offered
	// load and the latencies of the events committed in it, summarised apart
	// (warmup_lat_p99_ms, warmup_lat_max_ms): a relay starts cold
	// (connections, statements) while the load already arrives, and those
	// first events are not its steady latency.
	Warmup          time.Duration
	WarmupLatencies []time.Duration
	// Extra key=value pairs appended to the line (e.g. sent=123).
	Extra [][2]string
}

// PerSec is N divided by the elapsed seconds.
func (r Result) PerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.N) / r.Elapsed.Seconds()
}

// Line formats the RESULT line.
func (r Result) Line() string {
	var b strings.Builder
	peer := r.Peer
	if peer == "" {
		peer = "msgx"
	}
	mode := r.Mode
	if mode == "" {
		mode = "burndown"
	}
	fmt.Fprintf(&b, "RESULT peer=%s workload=%s", peer, r.Workload)
	if r.Variant != "" {
		fmt.Fprintf(&b, " variant=%s", r.Variant)
	}
	fmt.Fprintf(&b, " mode=%s n=%d seconds=%.3f per_sec=%.0f", mode, r.N, r.Elapsed.Seconds(), r.PerSec())
	if len(r.Latencies) > 0 {
		p50, p99 := Percentile(r.Latencies, 0.50), Percentile(r.Latencies, 0.99)
		fmt.Fprintf(&b, " lat_p50_ms=%.2f lat_p99_ms=%.2f", ms(p50), ms(p99))
	}
	if r.Warmup > 0 || len(r.WarmupLatencies) > 0 {
		fmt.Fprintf(&b, " warmup_s=%g warmup_n=%d", r.Warmup.Seconds(), len(r.WarmupLatencies))
		if len(r.WarmupLatencies) > 0 {
			p99 := Percentile(r.WarmupLatencies, 0.99)
			fmt.Fprintf(&b, " warmup_lat_p99_ms=%.2f warmup_lat_max_ms=%.2f", ms(p99), ms(r.WarmupLatencies[len(r.WarmupLatencies)-1]))
		}
	}
	for _, kv := range r.Extra {
		fmt.Fprintf(&b, " %s=%s", kv[0], kv[1])
	}
	return b.String()
}

// Print writes the RESULT line.
func (r Result) Print(w io.Writer) { fmt.Fprintln(w, r.Line()) }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Percentile returns the q-quantile (0..1) of ds; ds is sorted in place.
func Percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(q * float64(len(ds)-1))
	return ds[i]
}

// Ratio formats a/b for the summary lines printed after the RESULT lines.
func Ratio(a, b Result) string {
	if b.PerSec() == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", a.PerSec()/b.PerSec())
}
