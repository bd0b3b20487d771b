-- name: CursorInit
INSERT INTO msgx_inbox_cursor (stream, watermark, updated_at) VALUES ($1, $2, $3)
ON CONFLICT (stream) DO NOTHING

-- name: CursorGet
SELECT watermark, gap_from, gap_seen_at FROM msgx_inbox_cursor WHERE stream = $1

-- name: CursorSet
-- Compare-and-set on the watermark: a concurrent advance makes this a no-op.
UPDATE msgx_inbox_cursor SET watermark = $3, gap_from = $4, gap_seen_at = $5, updated_at = $6
WHERE stream = $1 AND watermark = $2

-- name: GapRecord
INSERT INTO msgx_inbox_gap (stream, from_id, to_id, first_seen_at, declared_at) VALUES ($1, $2, $3, $4, $5)

-- name: GapsSince
-- Permanent gaps still watched for late rows, newest first.
SELECT id, from_id, to_id, first_seen_at, declared_at FROM msgx_inbox_gap
WHERE stream = $1 AND declared_at >= $2 ORDER BY declared_at DESC, id DESC LIMIT $3

-- name: LateRecord
INSERT INTO msgx_inbox_late (stream, msg_id, gap_id, action, found_at) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (stream, msg_id) DO NOTHING

-- name: EnqueueDead
-- A message that is recorded and not processed (a late row of a permanent
-- gap, refused): DEAD from the start, unless its id is known already.
INSERT INTO msgx_inbox (stream, msg_id, payload, received_at, status, error_class, reason, finished_at)
SELECT $1, $2, $3, $4, 'DEAD', $5, $6, $4
WHERE NOT EXISTS (SELECT 1 FROM msgx_inbox_hst h WHERE h.stream = $1 AND h.msg_id = $2)
ON CONFLICT (stream, msg_id) DO NOTHING

-- name: AppliedAfter
-- The processed messages above an id: how many, the first and the last.
SELECT COUNT(*), COALESCE(MIN(msg_id), 0), COALESCE(MAX(msg_id), 0) FROM msgx_inbox
WHERE stream = $1 AND msg_id > $2 AND status = 'SUCCEEDED'

-- name: InPermanentGap
-- Whether an id lies in a gap of the stream declared permanent.
SELECT COUNT(*) FROM msgx_inbox_gap WHERE stream = $1 AND $2 BETWEEN from_id AND to_id
