package mqtt

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"sync"
)

// Slots hands out member slots of consumer groups. A subscription's client id
// is derived from the instance id, its topic and group and its slot; the slot
// is the lowest one no live subscription of that instance, topic and group
// holds, and it is free again once the subscription's connection is closed.
//
// That is how a consumer that stops and starts again takes over the broker
// session it left, with the QoS 1 messages it had not acknowledged and those
// queued for it meanwhile, while two live consumers of one group never share a
// client id (the broker would disconnect one of them). Drivers in one process
// that consume the same groups under the same instance id must share one Slots
// (WithSlots); by default each driver has its own.
type Slots struct {
	mu    sync.Mutex
	taken map[string]map[int]struct{}
}

// NewSlots returns an empty slot registry.
func NewSlots() *Slots { return &Slots{taken: map[string]map[int]struct{}{}} }

func (s *Slots) acquire(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	used := s.taken[key]
	if used == nil {
		used = map[int]struct{}{}
		s.taken[key] = used
	}
	n := 0
	for {
		if _, ok := used[n]; !ok {
			used[n] = struct{}{}
			return n
		}
		n++
	}
}

func (s *Slots) release(key string, slot int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.taken[key], slot)
	if len(s.taken[key]) == 0 {
		delete(s.taken, key)
	}
}

// ClientID is the MQTT client id of the subscription in the given slot of
// instance's membership of group on topic. Operators can use it to find or
// remove the broker session of a consumer that will not come back.
func ClientID(instance, topic, group string, slot int) string {
	h := sha256.Sum256([]byte(instance + "\x00" + topic + "\x00" + group))
	return instance + "-" + group + "-" + hex.EncodeToString(h[:6]) + "-" + strconv.Itoa(slot)
}

func slotKey(instance, topic, group string) string {
	return instance + "\x00" + topic + "\x00" + group
}
