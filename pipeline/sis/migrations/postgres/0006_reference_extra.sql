-- The elements of a reference packet other than RECS and its records (an
-- element the interface may add): kept per message, whether or not the
-- packet changed a record, so that nothing a message carried is lost. The
-- ref events of the message carry them too.
CREATE TABLE IF NOT EXISTS sis_ref_extra (
    msg_id      BIGINT PRIMARY KEY,
    kind        TEXT NOT NULL,
    extra       JSON NOT NULL,
    stored_at   TIMESTAMPTZ NOT NULL
);
