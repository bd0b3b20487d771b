package kafka

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/msgx/msgx/broker/driver"
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

// missingTopicCheck bounds topicMissing's metadata request.
const missingTopicCheck = time.Second

// topicMissing asks the cluster whether topic exists, after a publish to it
// ran out of time before any publish to it was confirmed. The client waits for a new topic's metadata between
// metadata refreshes (5 s apart by default) before it gives up on an unknown
// topic; a publish deadline shorter than those retries ends first and looks
// like a broker that does not answer. Asked directly, a broker that answers
// that the topic does not exist returns the broker's error: the message is
// refused, not waiting for a broker. Any other answer, or none within
// missingTopicCheck, returns nil.
func topicMissing(cl *kgo.Client, topic string) error {
	ctx, cancel := context.WithTimeout(context.Background(), missingTopicCheck)
	defer cancel()
	details, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil {
		return nil
	}
	if d, ok := details[topic]; ok && errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
		return fmt.Errorf("topic %s does not exist: %w", topic, d.Err)
	}
	return nil
}

// maxTopicLen is Kafka's limit on a topic name.
const maxTopicLen = 249

// RetryTopic is the topic where the subscriptions of group to topic put the
// messages they requeue: "<topic>.msgx-retry.<group>". Only that group reads
// it. When that is no legal Kafka topic name (a character other than
// letters, digits, '.', '_' and '-', or more than 249 characters), every
// other character becomes '_', the name is cut to fit, and '.' and 16 hex
// digits of the SHA-256 of topic, a zero byte and group are appended, so
// that two groups never share a retry topic.
func RetryTopic(topic, group string) string {
	name := topic + ".msgx-retry." + group
	if len(name) <= maxTopicLen && validTopicChars(name) {
		return name
	}
	sum := sha256.Sum256([]byte(topic + "\x00" + group))
	suffix := "." + hex.EncodeToString(sum[:8])
	b := []byte(name)
	for i, c := range b {
		if !legalIDChar(rune(c)) {
			b[i] = '_'
		}
	}
	return string(b[:min(len(b), maxTopicLen-len(suffix))]) + suffix
}

// retryTopicSpec is the retry topic of spec's group. It gets as many
// partitions as spec's topic, so that the group's members share its load
// alike; the broker's default when the topic does not exist yet.
func retryTopicSpec(ctx context.Context, cl *kgo.Client, spec driver.SubscriptionSpec) (topicSpec, error) {
	t := topicSpec{name: RetryTopic(spec.Topic, spec.Group), partitions: -1}
	details, err := kadm.NewClient(cl).ListTopics(ctx, spec.Topic)
	if err != nil {
		return t, fmt.Errorf("describe topic %q: %w", spec.Topic, err)
	}
	if d, ok := details[spec.Topic]; ok && d.Err == nil && len(d.Partitions) > 0 {
		t.partitions = int32(len(d.Partitions))
	}
	return t, nil
}
