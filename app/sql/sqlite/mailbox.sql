-- name: MailboxMaxID
-- The newest mailbox id: where a stream that starts from-now begins.
SELECT COALESCE(MAX(CMINMSGS_ID), 0) FROM {{table}}
