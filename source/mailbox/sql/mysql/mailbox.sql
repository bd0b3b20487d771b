-- name: Scan
-- Rows after the watermark in id order; the processed mark is never read.
SELECT CMINMSGS_ID, CMINMSGS_CLOB_MSG FROM {{table}} WHERE CMINMSGS_ID > ? ORDER BY CMINMSGS_ID LIMIT ?

-- name: ScanRange
-- The rows of an id range (a permanent gap's late rows), in id order.
SELECT CMINMSGS_ID, CMINMSGS_CLOB_MSG FROM {{table}} WHERE CMINMSGS_ID BETWEEN ? AND ? ORDER BY CMINMSGS_ID LIMIT ?

-- name: MaxID
-- The newest id: where a stream started "from now" begins.
SELECT COALESCE(MAX(CMINMSGS_ID), 0) FROM {{table}}

-- name: AutoIncrementStep
-- The id step of writers: the server's default and this session's. Above 1,
-- every id in between would look like a gap.
SELECT GREATEST(@@global.auto_increment_increment, @@session.auto_increment_increment)

-- name: Insert
INSERT INTO {{table}} (CMINMSGS_CLOB_MSG, CMINMSGS_DATE_RECEIVED, CMINMSGS_SUBSYSTEM_NAME, CMINMSGS_SUBSYSTEM_SEQUENCE,
    CMINMSGS_SUBSYSTEM_DATE_SENT, CMINMSGS_SUBSYSTEM_SUBTYPE, CMINMSGS_SUBSYSTEM_TYPE)
VALUES (?, ?, ?, ?, ?, ?, ?)

-- name: MarkProcessed
-- One row per statement: works on every MySQL version the shared server may run.
UPDATE {{table}} SET CMINMSGS_DATE_PROCESSED = ?, CMINMSGS_STATUS = ? WHERE CMINMSGS_ID = ?

-- name: Create
CREATE TABLE IF NOT EXISTS {{table}} (
    CMINMSGS_ID                  BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    CMINMSGS_CLOB_MSG            MEDIUMTEXT NOT NULL,
    CMINMSGS_DATE_RECEIVED       DATETIME,
    CMINMSGS_DATE_PROCESSED      DATETIME,
    CMINMSGS_SUBSYSTEM_NAME      VARCHAR(4),
    CMINMSGS_SUBSYSTEM_SEQUENCE  MEDIUMINT,
    CMINMSGS_SUBSYSTEM_DATE_SENT DATETIME,
    CMINMSGS_SUBSYSTEM_SUBTYPE   VARCHAR(4),
    CMINMSGS_SUBSYSTEM_TYPE      VARCHAR(4),
    CMINMSGS_STATUS              VARCHAR(20)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4

-- name: Drop
DROP TABLE IF EXISTS {{table}}

-- name: MessageLimit
-- What bounds one message: the largest packet the server takes, and the
-- message column's size in bytes (0 when the column is not found).
SELECT @@max_allowed_packet, COALESCE((SELECT CHARACTER_OCTET_LENGTH FROM information_schema.COLUMNS
    WHERE TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = ? AND COLUMN_NAME = 'CMINMSGS_CLOB_MSG'), 0)
