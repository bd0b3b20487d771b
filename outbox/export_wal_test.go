package outbox

import "time"

// WALRoundTrip encodes events as Enqueue does in the WAL mode and decodes
// them as the relay does.
func WALRoundTrip(now time.Time, events []Event) ([]Event, error) {
	if err := fillEvents(now, events); err != nil {
		return nil, err
	}
	return decodeEnvelope(encodeEnvelope(events))
}

// WALDecode decodes an envelope.
func WALDecode(b []byte) ([]Event, error) { return decodeEnvelope(b) }
