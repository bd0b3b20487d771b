package reliability

import (
	"context"
	"encoding/json"
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
				rec := wireRec{topic: r.Topic, key: string(r.Key), value: string(r.Value)}
				for _, h := range r.Headers {
					if h.Key == "msgx-event-id" {
						rec.id = string(h.Value)
					}
				}
				var v struct {
					MsgID        int64 `json:"msgId"`
					LastMsgID    int64 `json:"lastMsgId"`
					StateVersion int64 `json:"stateVersion"`
				}
				_ = json.Unmarshal(r.Value, &v)
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
