package console

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// sample is one minute's point of the overview's charts.
type sample struct {
	At time.Time
	// Processed and Published are per-minute rates (messages settled
	// SUCCEEDED by the inbox, events sent by the relay) since the last sample.
	Processed, Published float64
	// HeadAge is the oldest head age over the streams, in seconds.
	HeadAge float64
}

// history is a ring of the last samples, kept in this process only: it
// starts empty at each start.
type history struct {
	mu                sync.Mutex
	ring              []sample
	next, n           int
	lastProc, lastPub float64
	lastAt            time.Time
	haveCounters      bool
}

func newHistory(size int) *history { return &history{ring: make([]sample, size)} }

func (h *history) add(s sample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ring[h.next] = s
	h.next = (h.next + 1) % len(h.ring)
	if h.n < len(h.ring) {
		h.n++
	}
}

// all returns the samples, oldest first.
func (h *history) all() []sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]sample, 0, h.n)
	for i := 0; i < h.n; i++ {
		out = append(out, h.ring[(h.next-h.n+i+len(h.ring))%len(h.ring)])
	}
	return out
}

// Sample records a chart point now and then every interval until ctx ends.
func (c *Console) Sample(ctx context.Context) {
	t := time.NewTicker(c.every)
	defer t.Stop()
	for {
		c.sampleOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (c *Console) sampleOnce(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	now := c.clk.Now()
	s := sample{At: now}
	if st, err := c.adm.Status(ctx); err != nil {
		c.log.Warn("console: chart sample: status", "err", err)
	} else {
		for _, ss := range st.Streams {
			s.HeadAge = math.Max(s.HeadAge, ss.HeadAge)
		}
	}
	if c.gather != nil {
		proc, pub, err := counters(c.gather)
		if err != nil {
			c.log.Warn("console: chart sample: metrics", "err", err)
		} else {
			h := c.hist
			h.mu.Lock()
			if h.haveCounters {
				if mins := now.Sub(h.lastAt).Minutes(); mins > 0 {
					s.Processed = math.Max(0, proc-h.lastProc) / mins
					s.Published = math.Max(0, pub-h.lastPub) / mins
				}
			}
			h.lastProc, h.lastPub, h.lastAt, h.haveCounters = proc, pub, now, true
			h.mu.Unlock()
		}
	}
	c.hist.add(s)
}

// counters sums the inbox's SUCCEEDED and the relay's published counters.
func counters(g prometheus.Gatherer) (processed, published float64, err error) {
	mfs, err := g.Gather()
	if err != nil {
		return 0, 0, fmt.Errorf("console: gather: %w", err)
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "msgx_inbox_settled_total":
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "status" && l.GetValue() == "SUCCEEDED" {
						processed += m.GetCounter().GetValue()
					}
				}
			}
		case "msgx_outbox_published_total":
			for _, m := range mf.GetMetric() {
				published += m.GetCounter().GetValue()
			}
		}
	}
	return processed, published, nil
}

// chart is a sparkline of one series for the page's inline SVG.
type chart struct {
	Title  string
	Unit   string
	Last   string
	Max    string
	Points string
	Empty  bool
}

const chartW, chartH = 300.0, 60.0

func makeChart(title, unit string, vals []float64, format func(float64) string) chart {
	c := chart{Title: title, Unit: unit, Empty: len(vals) == 0}
	if c.Empty {
		return c
	}
	maxV := 0.0
	for _, v := range vals {
		maxV = math.Max(maxV, v)
	}
	c.Last, c.Max = format(vals[len(vals)-1]), format(maxV)
	var b strings.Builder
	step := chartW / 59
	off := chartW - step*float64(len(vals)-1)
	for i, v := range vals {
		y := chartH - 2
		if maxV > 0 {
			y = chartH - 2 - (v/maxV)*(chartH-6)
		}
		fmt.Fprintf(&b, "%.1f,%.1f ", off+step*float64(i), y)
	}
	c.Points = strings.TrimSpace(b.String())
	if len(vals) == 1 {
		// One sample: a level line, so that it shows.
		y := strings.SplitN(c.Points, ",", 2)[1]
		c.Points = "0," + y + " " + fmt.Sprintf("%.1f", chartW) + "," + y
	}
	return c
}

func (c *Console) charts() []chart {
	ss := c.hist.all()
	var proc, pub, head []float64
	for i, s := range ss {
		if i > 0 || c.gather == nil {
			proc, pub = append(proc, s.Processed), append(pub, s.Published)
		}
		head = append(head, s.HeadAge)
	}
	rate := func(v float64) string { return fmt.Sprintf("%.0f", v) }
	out := []chart{makeChart("Oldest head age", "", head, age)}
	if c.gather != nil {
		out = append(out, makeChart("Messages processed", "per min", proc, rate), makeChart("Events published", "per min", pub, rate))
	}
	return out
}
