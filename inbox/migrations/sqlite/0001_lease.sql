-- Leases give one process exclusive ownership of a named job until it expires.
-- Times are INTEGER Unix microseconds (see package store).
CREATE TABLE IF NOT EXISTS msgx_lease (
    name        TEXT PRIMARY KEY,
    owner       TEXT NOT NULL,
    expires_at  INTEGER NOT NULL
);
