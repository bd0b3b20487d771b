package mqtt

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/eclipse/paho.golang/paho"

	"github.com/msgx/msgx/broker/driver"
)

// The key travels as a user property. The port mirrors it into the
// msgx-partition-key header (driver.HeaderPartitionKey), which travels as a
// user property anyway, so a key equal to that header is not sent twice: it is
// read back from it. Only a key that differs from the header (or a header
// without a key) travels separately, as KeyProperty. Every user property costs
// the receiver an allocation per string in paho, so this halves the work for
// the usual keyed message.

// User properties the adapter reserves on the wire.
const (
	// KeyProperty carries a message key that differs from the
	// msgx-partition-key header.
	KeyProperty = "msgx-key"
	// keyB64Property carries a key that is not a valid MQTT string, base64-encoded.
	keyB64Property = "msgx-key-b64"
	// headerB64Property carries one header whose name or value is not a valid
	// MQTT string, as base64(name) ":" base64(value).
	headerB64Property = "msgx-b64"
)

// ErrInvalidTopic is returned for a topic MQTT cannot publish to or share.
var ErrInvalidTopic = errors.New("mqtt: invalid topic")

var b64 = base64.RawURLEncoding

// mqttString reports whether s is an MQTT UTF-8 string the broker accepts.
// The specification forbids U+0000 and surrogates; Mosquitto also drops the
// connection on control characters and non-characters, so those are refused
// here too (a header carrying them is base64-encoded instead).
func mqttString(s string) bool {
	if len(s) > 65535 || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		switch {
		case r <= 0x1f, r >= 0x7f && r <= 0x9f:
			return false
		case r >= 0xfdd0 && r <= 0xfdef, r&0xfffe == 0xfffe:
			return false
		}
	}
	return true
}

// validTopic checks a topic name messages are published to and consumed from.
func validTopic(topic string) error {
	switch {
	case topic == "":
		return fmt.Errorf("%w: empty", ErrInvalidTopic)
	case strings.ContainsAny(topic, "+#"):
		return fmt.Errorf("%w: %q has a wildcard", ErrInvalidTopic, topic)
	case !mqttString(topic):
		return fmt.Errorf("%w: %q is not a valid MQTT string", ErrInvalidTopic, topic)
	}
	return nil
}

// validGroup checks a group name used as the share name of $share/<group>/<topic>.
func validGroup(group string) error {
	switch {
	case group == "":
		return errors.New("mqtt: empty group")
	case strings.ContainsAny(group, "/+#"):
		return fmt.Errorf("mqtt: group %q: a share name cannot contain '/', '+' or '#'", group)
	case !mqttString(group):
		return fmt.Errorf("mqtt: group %q is not a valid MQTT string", group)
	}
	return nil
}

// toPublish maps a message to a QoS 1 PUBLISH: payload unchanged, key and
// headers as user properties.
func toPublish(topic string, m *driver.Message) *paho.Publish {
	user := make(paho.UserProperties, 0, len(m.Headers)+1)
	if pk, ok := m.Headers[driver.HeaderPartitionKey]; (ok && pk != m.Key) || (!ok && m.Key != "") {
		if mqttString(m.Key) {
			user = append(user, paho.UserProperty{Key: KeyProperty, Value: m.Key})
		} else {
			user = append(user, paho.UserProperty{Key: keyB64Property, Value: b64.EncodeToString([]byte(m.Key))})
		}
	}
	for k, v := range m.Headers {
		if mqttString(k) && mqttString(v) && !reserved(k) {
			user = append(user, paho.UserProperty{Key: k, Value: v})
		} else {
			user = append(user, paho.UserProperty{Key: headerB64Property,
				Value: b64.EncodeToString([]byte(k)) + ":" + b64.EncodeToString([]byte(v))})
		}
	}
	return &paho.Publish{Topic: topic, QoS: 1, Payload: m.Payload, Properties: &paho.PublishProperties{User: user}}
}

func reserved(k string) bool {
	return k == KeyProperty || k == keyB64Property || k == headerB64Property
}

// fromPublish is the inverse of toPublish. A property it cannot decode is kept
// as an ordinary header rather than dropped.
func fromPublish(p *paho.Publish) *driver.Message {
	m := &driver.Message{Payload: p.Payload}
	if p.Properties == nil || len(p.Properties.User) == 0 {
		return m
	}
	m.Headers = make(map[string]string, len(p.Properties.User))
	explicit := false
	for _, u := range p.Properties.User {
		switch u.Key {
		case KeyProperty:
			m.Key, explicit = u.Value, true
			continue
		case keyB64Property:
			if k, err := b64.DecodeString(u.Value); err == nil {
				m.Key, explicit = string(k), true
				continue
			}
		case headerB64Property:
			if name, value, ok := strings.Cut(u.Value, ":"); ok {
				k, err1 := b64.DecodeString(name)
				v, err2 := b64.DecodeString(value)
				if err1 == nil && err2 == nil {
					m.Headers[string(k)] = string(v)
					continue
				}
			}
		}
		m.Headers[u.Key] = u.Value
	}
	if !explicit {
		m.Key = m.Headers[driver.HeaderPartitionKey]
	}
	return m
}
