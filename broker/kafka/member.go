package kafka

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/msgx/msgx/broker/driver"
)

// maxInstanceIDLen is Kafka's limit on a group.instance.id (the one of
// topic names).
const maxInstanceIDLen = 249

// ValidInstanceID reports whether id can be a Kafka group.instance.id, or
// the stem of one: 1 to 200 ASCII letters, digits, '.', '_' and '-'. The
// bound leaves room for the topic the driver adds.
func ValidInstanceID(id string) error {
	if id == "" || len(id) > 200 {
		return fmt.Errorf("instance id %q: must have 1 to 200 characters", id)
	}
	for _, r := range id {
		if !legalIDChar(r) {
			return fmt.Errorf("instance id %q: %q is not allowed (letters, digits, '.', '_' and '-')", id, r)
		}
	}
	return nil
}

func legalIDChar(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
}

// claimMember returns the static member id of a new subscription of spec
// and reserves it until the subscription is forgotten: "<id>.<topic>", with
// "-2", "-3", … for further open subscriptions of the same topic and group.
// It is the same after a restart of a process that subscribes the same way,
// which is what lets the restarted member take its partitions back.
func (d *Driver) claimMember(spec driver.SubscriptionSpec) string {
	stem := d.cfg.instanceID + "." + spec.Topic
	if len(stem)+4 > maxInstanceIDLen || !validTopicChars(spec.Topic) {
		// A long topic, or one Kafka itself would refuse: a digest keeps the
		// id within the rules and still stable.
		sum := sha256.Sum256([]byte(spec.Topic))
		stem = d.cfg.instanceID + "." + hex.EncodeToString(sum[:8])
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	id := stem
	for n := 2; d.members[spec.Group+"\x00"+id]; n++ {
		id = stem + "-" + strconv.Itoa(n)
	}
	d.members[spec.Group+"\x00"+id] = true
	return id
}

func validTopicChars(topic string) bool {
	for _, r := range topic {
		if !legalIDChar(r) {
			return false
		}
	}
	return true
}
