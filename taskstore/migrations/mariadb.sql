-- taskstore schema, MariaDB (10.6 or later, for SKIP LOCKED). Times are Unix
-- microseconds (UTC) in BIGINT columns, so all three dialects compare and
-- order them the same way. InnoDB, so writes are transactional.
--
-- Ids, keys and statuses are compared as bytes, as PostgreSQL and SQLite
-- compare them: every table's text columns take utf8mb4_nopad_bin, not the
-- database's default collation, which ignores letter case and trailing
-- spaces (utf8mb4_general_ci) and made "move-1" the transition "Move-1".
-- utf8mb4_bin is not enough: it is a PAD SPACE collation, so 'm1' = 'm1 '.
-- (MariaDB: https://mariadb.com/kb/en/supported-character-sets-and-collations/
-- lists the _nopad_ collations, 10.2 and later.) A database an earlier
-- version created is converted by mariadb.2.sql.
CREATE TABLE IF NOT EXISTS tasks (
    id                VARCHAR(64)  NOT NULL,
    task_key          VARCHAR(191),
    parent_id         VARCHAR(64),
    scheduled_us      BIGINT,
    due_us            BIGINT       NOT NULL,
    status            VARCHAR(16)  NOT NULL,
    job_attempts      INT          NOT NULL DEFAULT 0,
    max_attempts      INT          NOT NULL,
    last_execution_us BIGINT,
    schedule_version  BIGINT       NOT NULL DEFAULT 0,
    current_run_count INT          NOT NULL DEFAULT 0,
    max_runs          INT          NOT NULL DEFAULT 0,
    advanced_by       VARCHAR(80),
    lease_owner       VARCHAR(64),
    lease_token       VARCHAR(80),
    lease_expires_us  BIGINT,
    payload           LONGBLOB,
    created_us        BIGINT       NOT NULL,
    CONSTRAINT pk_tasks PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin;
CREATE UNIQUE INDEX IF NOT EXISTS ux_tasks_task_key ON tasks (task_key);
CREATE UNIQUE INDEX IF NOT EXISTS ux_tasks_occurrence ON tasks (parent_id, scheduled_us);
CREATE INDEX IF NOT EXISTS ix_tasks_due ON tasks (status, due_us);
CREATE INDEX IF NOT EXISTS ix_tasks_lease ON tasks (lease_token);
CREATE TABLE IF NOT EXISTS status_audit (
    id            BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    task_id       VARCHAR(64)  NOT NULL,
    transition_id VARCHAR(80)  NOT NULL,
    from_status   VARCHAR(16)  NOT NULL,
    to_status     VARCHAR(16)  NOT NULL,
    at_us         BIGINT       NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin;
-- A transition id names one transition: at most one audit row.
CREATE UNIQUE INDEX IF NOT EXISTS ux_status_audit_transition ON status_audit (transition_id);
CREATE INDEX IF NOT EXISTS ix_status_audit_task ON status_audit (task_id);
CREATE TABLE IF NOT EXISTS task_runs (
    task_id          VARCHAR(64) NOT NULL,
    run_no           INT         NOT NULL,
    advance_id       VARCHAR(80) NOT NULL,
    schedule_version BIGINT      NOT NULL,
    at_us            BIGINT      NOT NULL,
    CONSTRAINT pk_task_runs PRIMARY KEY (task_id, run_no)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin;
CREATE INDEX IF NOT EXISTS ix_task_runs_advance ON task_runs (advance_id);
CREATE TABLE IF NOT EXISTS taskstore_migrations (
    version    INT    NOT NULL PRIMARY KEY,
    applied_us BIGINT NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin;
