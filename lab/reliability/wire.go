package reliability

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// wireRec is one record as a consumer saw it on Kafka.
type wireRec struct {
	topic, key, id string
	msgID          int64
	version        int64
	value          string
	// Route-passport events: where their record was; dead letters: the class.
	srcPartition int32
	srcOffset    int64
	errClass     string
	at           time.Time // the record's timestamp (when it was produced)
}

// wire records every record of the event topics, duplicates included.
type wire struct {
	mu   sync.Mutex
	recs []wireRec
	ids  map[string]int
}

func (w *wire) snapshot() ([]wireRec, map[string]int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ids := make(map[string]int, len(w.ids))
	for k, v := range w.ids {
		ids[k] = v
	}
	return append([]wireRec(nil), w.recs...), ids
}

func consume(ctx context.Context, seeds []string, topics ...string) (*wire, func(), error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.MetadataMinAge(200*time.Millisecond))
	if err != nil {
		return nil, nil, err
	}
	w := &wire{ids: map[string]int{}}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
				rec := wireRec{topic: r.Topic, key: string(r.Key), value: string(r.Value), at: r.Timestamp}
				for _, h := range r.Headers {
					switch h.Key {
					case "msgx-event-id":
						rec.id = string(h.Value)
					case "msgx-error-class":
						rec.errClass = string(h.Value)
					}
				}
				var v struct {
					MsgID        int64 `json:"msgId"`
					LastMsgID    int64 `json:"lastMsgId"`
					StateVersion int64 `json:"stateVersion"`
					Source       struct {
						Partition int32 `json:"partition"`
						Offset    int64 `json:"offset"`
					} `json:"source"`
				}
				_ = json.Unmarshal(r.Value, &v)
				rec.srcPartition, rec.srcOffset = v.Source.Partition, v.Source.Offset
				rec.msgID, rec.version = v.MsgID+v.LastMsgID, v.StateVersion
				w.mu.Lock()
				w.recs = append(w.recs, rec)
				w.ids[rec.id]++
				w.mu.Unlock()
			})
		}
	}()
	return w, func() { cancel(); <-done; cl.Close() }, nil
}

// routeIndex: the distinct event ids per output topic per source position
// ("partition/offset"), and the dead letters' classes by payload.
func (w *wire) routeIndex() (map[string]map[string][]string, map[string]string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]map[string][]string{routeIn: {}, routeGeo: {}}
	dlq := map[string]string{}
	for _, r := range w.recs {
		switch r.topic {
		case routeIn, routeGeo:
			pos := fmt.Sprintf("%d/%d", r.srcPartition, r.srcOffset)
			if !slices.Contains(out[r.topic][pos], r.id) {
				out[r.topic][pos] = append(out[r.topic][pos], r.id)
			}
		case routeDLQ:
			dlq[r.value] = r.errClass + " "
		}
	}
	return out, dlq
}
