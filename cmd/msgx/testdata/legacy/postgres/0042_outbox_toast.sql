-- Events are kept in the row uncompressed up to a page: a flight's schd
-- event carries its whole state (2-3 kB), over the default 2 kB threshold
-- at which every insert compressed it with pglz and every claim
-- decompressed it again, about a seventh of the server's CPU per SIS
-- message. The rows live until they are sent and cleaned up, so the extra
-- bytes are short-lived.
ALTER TABLE msgx_outbox SET (toast_tuple_target = 8160);
ALTER TABLE msgx_outbox_sent SET (toast_tuple_target = 8160);
