-- taskstore schema version 2, MariaDB: upgrades the tables version 1
-- created with the database's default collation (case-insensitive, trailing
-- spaces ignored) to compare every id, key and status as bytes, as
-- mariadb.sql now creates them. Converting to a collation that tells more
-- strings apart can never make a unique index collide, and the columns keep
-- their widths in characters, so no stored value is refused or cut.
ALTER TABLE tasks CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin;
ALTER TABLE status_audit CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin;
ALTER TABLE task_runs CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin;
