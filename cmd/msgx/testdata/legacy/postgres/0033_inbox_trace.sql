-- The W3C trace context (traceparent, tracestate) a message arrived with, so
-- that its processing continues the trace of its ingest. NULL when the source
-- has none (the shared mailbox carries no headers).
ALTER TABLE msgx_inbox ADD COLUMN IF NOT EXISTS traceparent TEXT;
ALTER TABLE msgx_inbox ADD COLUMN IF NOT EXISTS tracestate TEXT;
