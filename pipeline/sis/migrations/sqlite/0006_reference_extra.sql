-- See the PostgreSQL migration.
CREATE TABLE IF NOT EXISTS sis_ref_extra (
    msg_id      INTEGER PRIMARY KEY,
    kind        TEXT NOT NULL,
    extra       TEXT NOT NULL,
    stored_at   INTEGER NOT NULL
);
