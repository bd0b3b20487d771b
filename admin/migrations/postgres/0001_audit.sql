-- Every operation the admin API carried out or previewed (replays, dry runs):
-- who, when, what, with which selection, and how many rows it touched. The
-- inbox keeps its own replay audit (msgx_inbox_replay); this one covers the
-- outbox's dead letters too and records the dry runs.
CREATE TABLE IF NOT EXISTS msgx_admin_audit (
    id       BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at       TIMESTAMPTZ NOT NULL,
    actor    TEXT NOT NULL,
    action   TEXT NOT NULL,
    source   TEXT NOT NULL,
    scope    TEXT NOT NULL,
    selector TEXT NOT NULL,
    dry_run  BOOLEAN NOT NULL,
    count    INTEGER NOT NULL,
    reason   TEXT NOT NULL,
    detail   TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS msgx_admin_audit_at ON msgx_admin_audit (at);
