package nats

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"unicode"
)

// errBadName reports a topic or group that cannot be a NATS subject token or
// JetStream name.
var errBadName = errors.New("nats: invalid name")

// validTopic reports whether topic can be appended to the subject prefix: NATS
// subjects are dot-separated tokens without whitespace or wildcards.
func validTopic(topic string) error {
	if topic == "" {
		return fmt.Errorf("%w: empty topic", errBadName)
	}
	for _, tok := range strings.Split(topic, ".") {
		if tok == "" || tok == "*" || tok == ">" {
			return fmt.Errorf("%w: topic %q is not a literal NATS subject", errBadName, topic)
		}
	}
	for _, r := range topic {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) || r == '*' || r == '>' {
			return fmt.Errorf("%w: topic %q is not a literal NATS subject", errBadName, topic)
		}
	}
	return nil
}

// maxName keeps generated stream and consumer names well inside the server's
// limits (they become file names on the server).
const maxName = 200

// jsName turns s into a JetStream stream or consumer name. Names may not hold
// '.', whitespace, wildcards or path separators: '.' becomes '_' and anything
// else outside [A-Za-z0-9_-] becomes '_' too. When that mapping could make two
// inputs collide (the input held '_' or another replaced character) a short
// hash of the input is appended, so distinct inputs keep distinct names while
// common names ("orders.created" -> "msgx_orders_created") stay readable.
func jsName(s string) string {
	var b strings.Builder
	ambiguous := false
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-':
			b.WriteRune(r)
		case r == '.':
			b.WriteByte('_')
		default:
			ambiguous = true
			b.WriteByte('_')
		}
	}
	name := b.String()
	if len(name) > maxName {
		name, ambiguous = name[:maxName], true
	}
	if ambiguous {
		h := fnv.New32a()
		_, _ = h.Write([]byte(s))
		name = fmt.Sprintf("%s_%08x", name, h.Sum32())
	}
	return name
}

// validGroup reports whether group can name a consumer.
func validGroup(group string) error {
	if group == "" {
		return fmt.Errorf("%w: empty group", errBadName)
	}
	return nil
}
