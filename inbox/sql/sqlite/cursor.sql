-- name: CursorInit
INSERT INTO msgx_inbox_cursor (stream, watermark, updated_at) VALUES (?1, ?2, ?3)
ON CONFLICT (stream) DO NOTHING

-- name: CursorGet
SELECT watermark, gap_from, gap_seen_at FROM msgx_inbox_cursor WHERE stream = ?1

-- name: CursorSet
-- Compare-and-set on the watermark: a concurrent advance makes this a no-op.
UPDATE msgx_inbox_cursor SET watermark = ?3, gap_from = ?4, gap_seen_at = ?5, updated_at = ?6
WHERE stream = ?1 AND watermark = ?2

-- name: GapRecord
INSERT INTO msgx_inbox_gap (stream, from_id, to_id, first_seen_at, declared_at) VALUES (?1, ?2, ?3, ?4, ?5)

-- name: GapsSince
-- Permanent gaps still watched for late rows, newest first.
SELECT id, from_id, to_id, declared_at FROM msgx_inbox_gap
WHERE stream = ?1 AND declared_at >= ?2 ORDER BY declared_at DESC, id DESC LIMIT ?3

-- name: LateRecord
INSERT INTO msgx_inbox_late (stream, msg_id, gap_id, action, found_at) VALUES (?1, ?2, ?3, ?4, ?5)
ON CONFLICT (stream, msg_id) DO NOTHING

-- name: Now
-- The database's clock (the embedded store's host), in microseconds.
SELECT CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)
