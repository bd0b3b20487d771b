package mqtt

import (
	"context"
	"errors"

	"github.com/eclipse/paho.golang/paho"

	"github.com/msgx/msgx/broker/driver"
)

// classify gives a publish error its class (see docs/adapters/mqtt.md). A
// refusal by reason code was classified where the PUBACK was read.
func classify(err error) error {
	return driver.ClassifyBy(err, errorCode)
}

func errorCode(err error) driver.ErrorCode {
	switch {
	case errors.Is(err, ErrInvalidTopic):
		return driver.Rejected
	case errors.Is(err, ErrConnectionLost),
		errors.Is(err, ErrClosed),
		errors.Is(err, driver.ErrNotStarted),
		errors.Is(err, context.DeadlineExceeded),
		driver.Disconnected(err):
		return driver.Unavailable
	}
	return driver.Unknown
}

// PUBACK reason codes (MQTT 5.0, 3.4.2.1) that refuse the message itself.
const (
	reasonNotAuthorized        = 0x87
	reasonTopicNameInvalid     = 0x90
	reasonPacketTooLarge       = 0x95
	reasonQuotaExceeded        = 0x97
	reasonPayloadFormatInvalid = 0x99
)

// reasonClass is the class of a failure reason code (>= 0x80) on a PUBACK.
// Quota exceeded is the broker's state, not the message's; unspecified
// (0x80), implementation specific (0x83) and packet identifier in use (0x91)
// say nothing either way.
func reasonClass(code byte) driver.ErrorCode {
	switch code {
	case reasonNotAuthorized, reasonTopicNameInvalid, reasonPacketTooLarge, reasonPayloadFormatInvalid:
		return driver.Rejected
	case reasonQuotaExceeded:
		return driver.Unavailable
	}
	return driver.Unknown
}

// packetLimit is the bound on a PUBLISH packet: the smaller of the
// configured one and the broker's, where each is set (0: none).
func packetLimit(configured, broker int) int {
	switch {
	case configured <= 0:
		return broker
	case broker <= 0:
		return configured
	}
	return min(configured, broker)
}

// packetSize is the size of p's PUBLISH packet on the wire: the fixed
// header (type and flags, then the remaining length as a variable byte
// integer) and what follows it.
func packetSize(p *paho.Publish) int {
	rest := 0
	for _, b := range p.Packet().Buffers() {
		rest += len(b)
	}
	lenBytes := 1
	for n := rest; n >= 128; n /= 128 {
		lenBytes++
	}
	return 1 + lenBytes + rest
}
