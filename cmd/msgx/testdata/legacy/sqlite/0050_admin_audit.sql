-- Every operation the admin API carried out or previewed (see the PostgreSQL
-- migration of the same number).
CREATE TABLE IF NOT EXISTS msgx_admin_audit (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    at       INTEGER NOT NULL,
    actor    TEXT NOT NULL,
    action   TEXT NOT NULL,
    source   TEXT NOT NULL,
    scope    TEXT NOT NULL,
    selector TEXT NOT NULL,
    dry_run  INTEGER NOT NULL,
    count    INTEGER NOT NULL,
    reason   TEXT NOT NULL,
    detail   TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS msgx_admin_audit_at ON msgx_admin_audit (at);
