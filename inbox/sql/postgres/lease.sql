-- name: LeaseAcquire
-- Takes the lease when it is free, expired, or already ours.
INSERT INTO msgx_lease (name, owner, expires_at) VALUES ($1, $2, $3)
ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at
WHERE msgx_lease.owner = EXCLUDED.owner OR msgx_lease.expires_at <= $4
RETURNING owner

-- name: LeaseRenew
UPDATE msgx_lease SET expires_at = $3 WHERE name = $1 AND owner = $2

-- name: LeaseRelease
DELETE FROM msgx_lease WHERE name = $1 AND owner = $2

-- name: LeaseFence
-- Held in every pump transaction: a taker's upsert waits for the batch to end,
-- and a batch of an owner that lost the lease finds no row.
SELECT expires_at FROM msgx_lease WHERE name = $1 AND owner = $2 FOR SHARE
