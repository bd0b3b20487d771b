-- The newest request of each answer type (LatestRequest, for every RESP),
-- found in an index rather than by reading sis_req_track, which keeps every
-- request sent.
CREATE INDEX IF NOT EXISTS sis_req_track_answer ON sis_req_track (answer_type, id);
