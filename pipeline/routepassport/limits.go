package routepassport

// DefaultMaxRecordBytes bounds an input record (1 MiB).
const DefaultMaxRecordBytes = 1 << 20
