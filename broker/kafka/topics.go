package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// topicSpec is a topic the driver creates when it is missing.
type topicSpec struct {
	name       string
	partitions int32 // -1: the broker's default
	configs    map[string]string
}

// WithTopic declares a topic the driver creates at Start when it does not
// exist yet, with partitions partitions (-1: the broker's num.partitions) and
// the given topic configs (for example cleanup.policy=compact for a state
// topic). The replication factor is the broker's default. An existing topic
// is left as it is.
func WithTopic(name string, partitions int32, configs map[string]string) Option {
	return func(c *config) {
		c.topics = append(c.topics, topicSpec{name: name, partitions: partitions, configs: configs})
	}
}

// ensureTopics creates the topics that do not exist yet. A topic created
// concurrently by someone else counts as existing.
func ensureTopics(ctx context.Context, cl *kgo.Client, topics ...topicSpec) error {
	adm := kadm.NewClient(cl)
	for _, t := range topics {
		var cfg map[string]*string
		if len(t.configs) > 0 {
			cfg = make(map[string]*string, len(t.configs))
			for k, v := range t.configs {
				cfg[k] = kadm.StringPtr(v)
			}
		}
		resp, err := adm.CreateTopic(ctx, t.partitions, -1, cfg, t.name)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create topic %q: %w", t.name, err)
		}
	}
	return nil
}
