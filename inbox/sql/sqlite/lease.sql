-- The embedded store is one host: lease times are that host's clock (?4,
-- microseconds like every SQLite time here), ?3 the time to live.

-- name: LeaseAcquire
-- Takes the lease when it is free, expired, already ours, or held by another
-- incarnation of our instance id (?5, NULL for an owner without one); a new
-- owner gets the next epoch.
INSERT INTO msgx_lease (name, owner, expires_at, epoch) VALUES (?1, ?2, ?4 + ?3, 1)
ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at,
    epoch = msgx_lease.epoch + CASE WHEN msgx_lease.owner = EXCLUDED.owner THEN 0 ELSE 1 END
WHERE msgx_lease.owner = EXCLUDED.owner OR msgx_lease.expires_at <= ?4
    OR substr(msgx_lease.owner, 1, length(?5) + 1) = ?5 || '/'
RETURNING owner, epoch

-- name: LeaseRenew
UPDATE msgx_lease SET expires_at = ?4 + ?3 WHERE name = ?1 AND owner = ?2

-- name: LeaseRelease
DELETE FROM msgx_lease WHERE name = ?1 AND owner = ?2

-- name: LeaseFence
-- Read in every pump transaction (SQLite's write lock serialises it with a
-- taker): a batch of an owner that lost the lease finds no row. Returns
-- whether the lease is still unexpired.
SELECT expires_at > ?4 FROM msgx_lease WHERE name = ?1 AND owner = ?2 AND epoch = ?3

-- name: LeaseHolder
-- Who holds (or last held, when expired) a lease: status shows it.
SELECT owner, expires_at FROM msgx_lease WHERE name = ?1
