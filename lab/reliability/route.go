package reliability

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The route-passport traffic: records on the input topic for a fixed set
// of routes (so that a route's updates must come out in order), and hostile
// records that must each end on the dead-letter topic with a class.
const (
	routeInput = "pcp.request.survey-georeference.v1"
	routeDLQ   = "pcp.request.survey-georeference-dlq.v1"
	routeIn    = "pcp.route.in.v1"
	routeGeo   = "pcp.route.georeference.v1"
)

// routeTopics are the topics the campaign creates on kfake.
var routeTopics = []string{routeInput, routeDLQ, routeIn, routeGeo}

type produced struct {
	key       string
	value     string
	partition int32
	offset    int64
	hostile   string    // its kind when it is hostile
	at        time.Time // its timestamp
}

// routeLog is what the producer wrote, with the positions Kafka gave.
type routeLog struct {
	mu   sync.Mutex
	recs []produced
}

func (l *routeLog) snapshot() []produced {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]produced(nil), l.recs...)
}

func routeRecord(route string, i int) string {
	return fmt.Sprintf(`{"routeId":%q,"routeNameFull":"route %s","traceId":"tr-%d","correlationId":"co-%d","geometry":{"type":"LineString","coordinates":[[%d.5,55.8],[48.5,55.85]]}}`,
		route, route, i, i, i%90)
}

func hostileRoutes() map[string]string {
	nest := strings.Repeat("[", 20000) + strings.Repeat("]", 20000)
	obj := strings.Repeat(`{"a":`, 20000) + "1" + strings.Repeat("}", 20000)
	return map[string]string{
		"not-json":       "this is not JSON",
		"truncated":      `{"routeId":"H-1","routeNameFull":"x","geometry":{"type":"Point"`,
		"open-ring":      `{"routeId":"H-2","routeNameFull":"x","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,0],[1,1],[0,1]]]}}`,
		"short-ring":     `{"routeId":"H-3","routeNameFull":"x","geometry":{"type":"Polygon","coordinates":[[[0,0],[1,1],[0,0]]]}}`,
		"huge-number":    `{"routeId":"H-4","routeNameFull":"x","geometry":{"type":"Point","coordinates":[1e400,0]}}`,
		"mixed-dims":     `{"routeId":"H-5","routeNameFull":"x","geometry":{"type":"LineString","coordinates":[[0,0],[1,1,1]]}}`,
		"feature":        `{"routeId":"H-6","routeNameFull":"x","geometry":{"type":"Feature","geometry":null}}`,
		"deep-array":     `{"routeId":"H-7","routeNameFull":"x","geometry":{"type":"Point","coordinates":` + nest + `}}`,
		"deep-object":    `{"routeId":"H-8","routeNameFull":"x","geometry":` + obj + `}`,
		"wrong-types":    `{"routeId":8,"routeNameFull":["x"],"geometry":"POINT (1 2)"}`,
		"no-geometry":    `{"routeId":"H-9","routeNameFull":"x"}`,
		"invalid-utf8":   "{\"routeId\":\"H-10\",\"routeNameFull\":\"\xff\xfe\",\"geometry\":{\"type\":\"Point\",\"coordinates\":[1,2]}}",
		"nan-coordinate": `{"routeId":"H-11","routeNameFull":"x","geometry":{"type":"Point","coordinates":[NaN,2]}}`,
	}
}

// produceRoutes writes records for routes R-0..R-(n-1) until ctx ends; the
// hostile ones first when bad is set.
func produceRoutes(ctx context.Context, seeds []string, routes int, pace time.Duration, bad bool, log *routeLog) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(routeInput))
	if err != nil {
		return err
	}
	defer cl.Close()
	send := func(key, value, kind string) error {
		r := &kgo.Record{Key: []byte(key), Value: []byte(value)}
		// Long enough to outlast a Kafka outage: the idempotent producer
		// retries until the record is written, and a record the log does not
		// know would be an unexplained event to the checker.
		pctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if err := cl.ProduceSync(pctx, r).FirstErr(); err != nil {
			return err
		}
		log.mu.Lock()
		log.recs = append(log.recs, produced{key: key, value: value, partition: r.Partition, offset: r.Offset, hostile: kind, at: r.Timestamp})
		log.mu.Unlock()
		return nil
	}
	if bad {
		for kind, v := range hostileRoutes() {
			if err := send("H-"+kind, v, kind); err != nil {
				return err
			}
		}
	}
	r := rand.New(rand.NewPCG(7, uint64(time.Now().UnixNano())))
	for i := 0; ctx.Err() == nil; i++ {
		route := fmt.Sprintf("R-%d", r.IntN(routes))
		if err := send(route, routeRecord(route, i), ""); err != nil {
			return err
		}
		pause(ctx, pace)
	}
	return nil
}

// routeMissing says what the route-passport history still lacks: valid
// records without their two events, hostile ones without a dead letter.
func routeMissing(recs []produced, w *wire) string {
	out, dlq := w.routeIndex()
	var events, letters []string
	for _, p := range recs {
		pos := fmt.Sprintf("%d/%d", p.partition, p.offset)
		if p.hostile != "" {
			if dlq[p.value] == "" {
				letters = append(letters, p.hostile)
			}
		} else if len(out[routeIn][pos]) == 0 || len(out[routeGeo][pos]) == 0 {
			events = append(events, pos)
		}
	}
	if len(events)+len(letters) == 0 {
		return ""
	}
	return fmt.Sprintf("%d records without their events (first %v), dead letters missing for %v", len(events), events[:min(len(events), 5)], letters)
}

// checkRoutes compares the route-passport history with what was produced.
func checkRoutes(recs []produced, w *wire, f *Figures, v *Violations) {
	out, dlq := w.routeIndex()
	valid := map[string]bool{}
	for _, p := range recs {
		pos := fmt.Sprintf("%d/%d", p.partition, p.offset)
		if p.hostile != "" {
			f.BadInputTried++
			f.BadInputOutcomes = append(f.BadInputOutcomes, fmt.Sprintf("kafka %s: dead letter, class %s", p.hostile, dlq[p.value]))
			if dlq[p.value] == "" {
				v.BadInputFates = append(v.BadInputFates, fmt.Sprintf("route record %s (%s) not on the dead-letter topic", pos, p.hostile))
			}
			for _, t := range []string{routeIn, routeGeo} {
				if len(out[t][pos]) > 0 {
					v.BadInputFates = append(v.BadInputFates, fmt.Sprintf("route record %s (%s) produced an event on %s", pos, p.hostile, t))
				}
			}
			continue
		}
		f.RouteRecords++
		valid[pos] = true
		for _, t := range []string{routeIn, routeGeo} {
			ids := out[t][pos]
			switch {
			case len(ids) == 0:
				v.Lost = append(v.Lost, fmt.Sprintf("route record %s (%s): no event on %s", pos, p.key, t))
			case len(ids) > 1:
				v.Doubled = append(v.Doubled, fmt.Sprintf("route record %s: %d different event ids on %s", pos, len(ids), t))
			}
		}
	}
	for t, byPos := range out {
		for pos := range byPos {
			if !valid[pos] {
				v.Doubled = append(v.Doubled, fmt.Sprintf("an event on %s for record %s, which was not produced as valid", t, pos))
			}
		}
	}
	// Per-key order: a route's first-seen events in the order of its records.
	recsW, _ := w.snapshot()
	last := map[string]int64{}
	seen := map[string]bool{}
	for _, r := range recsW {
		if (r.topic != routeIn && r.topic != routeGeo) || seen[r.id] {
			continue
		}
		seen[r.id] = true
		k := r.topic + "|" + r.key
		if o, ok := last[k]; ok && r.srcOffset < o {
			v.Order = append(v.Order, fmt.Sprintf("%s route %s: the event of offset %d after that of %d", r.topic, r.key, r.srcOffset, o))
		}
		last[k] = max(last[k], r.srcOffset)
	}
}
