-- See the PostgreSQL migration of the same number.
CREATE INDEX IF NOT EXISTS sis_req_track_answer ON sis_req_track (answer_type, id);
