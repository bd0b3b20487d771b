-- The stream lease's fencing epoch: it grows by one each time the lease
-- passes to another owner; a pump transaction checks it.
ALTER TABLE msgx_lease ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;
