-- Leases give one process exclusive ownership of a named job (a strict-FIFO
-- stream pump) until it expires; a crashed owner's lease is taken over.
CREATE TABLE IF NOT EXISTS msgx_lease (
    name        TEXT PRIMARY KEY,
    owner       TEXT NOT NULL,
    expires_at  TIMESTAMPTZ NOT NULL
);
