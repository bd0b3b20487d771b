-- The flight versions written as cheaply as the processing transaction
-- allows (recording them costs the SIS processor a few percent of its
-- speed; docs/benchmarks.md): the changes and the events as text. msgx
-- alone writes and reads them, always as valid JSON; the json type parsed
-- every value again on insert.
ALTER TABLE flight_version ALTER COLUMN changes TYPE TEXT, ALTER COLUMN events TYPE TEXT;
