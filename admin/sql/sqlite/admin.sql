-- Read-only views of the inbox and outbox tables for operators, and the
-- admin audit. Each statement stays on an index of the table it reads.

-- name: StreamHead
SELECT msg_id, status, received_at, processing_started_at, attempts, COALESCE(error_class, ''), COALESCE(reason, '')
FROM msgx_inbox WHERE stream = ?1 AND status IN ('PENDING', 'FAILED') ORDER BY msg_id LIMIT 1

-- name: StreamCounts
SELECT COUNT(*) FILTER (WHERE status IN ('PENDING', 'FAILED')), COUNT(*) FILTER (WHERE status = 'FAILED'),
       COUNT(*) FILTER (WHERE status = 'DEAD')
FROM msgx_inbox WHERE stream = ?1 AND status IN ('PENDING', 'FAILED', 'DEAD')

-- name: StreamGaps
SELECT COUNT(*), COALESCE(SUM(to_id - from_id + 1), 0) FROM msgx_inbox_gap WHERE stream = ?1

-- name: BackfillStatus
-- Terminal messages whose processed mark is not written yet; overdue ones
-- were received before ?2.
SELECT COUNT(*), COUNT(*) FILTER (WHERE received_at <= ?2), COUNT(*) FILTER (WHERE backfill_error IS NOT NULL),
       MIN(received_at)
FROM msgx_inbox WHERE stream = ?1 AND backfill_next_at IS NOT NULL AND status IN ('SUCCEEDED', 'SKIPPED', 'DEAD')

-- name: DeadList
SELECT msg_id, status, COALESCE(error_class, ''), COALESCE(reason, ''), COALESCE(kind, ''), attempts, received_at, finished_at
FROM msgx_inbox
WHERE stream = ?1 AND status IN ('FAILED', 'DEAD') AND (?2 = '' OR error_class = ?2) AND msg_id > ?3
ORDER BY msg_id LIMIT ?4

-- name: ErrorHistory
SELECT attempt, error_class, reason, at FROM msgx_inbox_error WHERE stream = ?1 AND msg_id = ?2 ORDER BY id

-- name: ReplayCandidates
SELECT msg_id FROM msgx_inbox WHERE stream = ?1 AND status IN ('FAILED', 'DEAD') AND error_class = ?2
ORDER BY msg_id LIMIT ?3

-- name: TargetCounts
SELECT target, COUNT(*) FILTER (WHERE status = 'PENDING'), COUNT(*) FILTER (WHERE status = 'DEAD')
FROM msgx_outbox GROUP BY target

-- name: AuditInsert
INSERT INTO msgx_admin_audit (at, actor, action, source, scope, selector, dry_run, count, reason, detail)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)

-- name: Payload
-- The first ?3 bytes of a message's payload, and its full length.
SELECT substr(payload, 1, ?3), COALESCE(length(payload), 0) FROM msgx_inbox WHERE stream = ?1 AND msg_id = ?2

-- name: GapList
-- Permanent gaps the poller declared, newest first, with the late rows that
-- showed up in them afterwards.
SELECT g.id, g.stream, g.from_id, g.to_id, g.first_seen_at, g.declared_at,
       (SELECT COUNT(*) FROM msgx_inbox_late l WHERE l.stream = g.stream AND l.gap_id = g.id)
FROM msgx_inbox_gap g WHERE g.stream = ?1 ORDER BY g.declared_at DESC, g.id DESC LIMIT ?2
