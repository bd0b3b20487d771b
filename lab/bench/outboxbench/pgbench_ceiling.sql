-- The ceiling: one transaction inserting 100 rows of 200 bytes.
INSERT INTO msgx_ceiling (payload) SELECT convert_to(repeat('x', 200), 'UTF8') FROM generate_series(1, 100);
