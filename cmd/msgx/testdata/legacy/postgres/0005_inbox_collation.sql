-- Indexed text columns of the inbox compare bytewise (COLLATE "C"), as the
-- outbox's do, whatever the database's default collation: every statement of
-- the pump descends (stream, msg_id) or (stream, identity), and a locale's
-- comparison costs several times a byte comparison. Identities and stream
-- names are identifiers, so byte order is the only order they need.
ALTER TABLE msgx_inbox ALTER COLUMN stream TYPE TEXT COLLATE "C";
ALTER TABLE msgx_inbox_identity ALTER COLUMN stream TYPE TEXT COLLATE "C";
ALTER TABLE msgx_inbox_identity ALTER COLUMN identity TYPE TEXT COLLATE "C";
ALTER TABLE msgx_inbox_error ALTER COLUMN stream TYPE TEXT COLLATE "C";
ALTER TABLE msgx_inbox_cursor ALTER COLUMN stream TYPE TEXT COLLATE "C";
ALTER TABLE msgx_inbox_gap ALTER COLUMN stream TYPE TEXT COLLATE "C";
ALTER TABLE msgx_inbox_replay ALTER COLUMN stream TYPE TEXT COLLATE "C";
ALTER TABLE msgx_inbox_hst ALTER COLUMN stream TYPE TEXT COLLATE "C";
ALTER TABLE msgx_lease ALTER COLUMN name TYPE TEXT COLLATE "C";
