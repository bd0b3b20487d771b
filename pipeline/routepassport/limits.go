package routepassport

// DefaultMaxRecordBytes bounds an input record (1 000 000 bytes): with the
// dead-letter headers' room it fits under Kafka's default message limit
// (1 048 588 bytes, the broker's message.max.bytes), so a refused record of
// any size up to it goes to the dead-letter topic whole.
const DefaultMaxRecordBytes = 1_000_000

// DeadLetterRoom is what the input limit leaves of the broker's message limit
// for a dead-letter copy's key, headers (the record's own, the error's, the
// source's) and framing: New refuses a record limit that does not leave it.
// A copy that still does not fit goes by reference (broker.ByReference).
const DeadLetterRoom = 16 << 10

// EventHeaderRoom is what an output event's size check leaves of the
// broker's message limit for the headers the relay adds when it sends the
// event (event id, trace context).
const EventHeaderRoom = 1 << 10
