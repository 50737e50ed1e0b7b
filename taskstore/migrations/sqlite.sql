-- taskstore schema, SQLite. Times are Unix microseconds (UTC) in INTEGER
-- columns, so all three dialects compare and order them the same way.
CREATE TABLE IF NOT EXISTS tasks (
    id                TEXT    NOT NULL,
    task_key          TEXT,
    parent_id         TEXT,
    scheduled_us      INTEGER,
    due_us            INTEGER NOT NULL,
    status            TEXT    NOT NULL,
    job_attempts      INTEGER NOT NULL DEFAULT 0,
    max_attempts      INTEGER NOT NULL,
    last_execution_us INTEGER,
    schedule_version  INTEGER NOT NULL DEFAULT 0,
    current_run_count INTEGER NOT NULL DEFAULT 0,
    max_runs          INTEGER NOT NULL DEFAULT 0,
    advanced_by       TEXT,
    lease_owner       TEXT,
    lease_token       TEXT,
    lease_expires_us  INTEGER,
    payload           BLOB,
    created_us        INTEGER NOT NULL,
    CONSTRAINT pk_tasks PRIMARY KEY (id)
);
CREATE UNIQUE INDEX IF NOT EXISTS ux_tasks_task_key ON tasks (task_key);
CREATE UNIQUE INDEX IF NOT EXISTS ux_tasks_occurrence ON tasks (parent_id, scheduled_us);
CREATE INDEX IF NOT EXISTS ix_tasks_due ON tasks (status, due_us);
CREATE INDEX IF NOT EXISTS ix_tasks_lease ON tasks (lease_token);
CREATE TABLE IF NOT EXISTS status_audit (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id       TEXT    NOT NULL,
    transition_id TEXT    NOT NULL,
    from_status   TEXT    NOT NULL,
    to_status     TEXT    NOT NULL,
    at_us         INTEGER NOT NULL
);
-- A transition id names one transition: at most one audit row.
CREATE UNIQUE INDEX IF NOT EXISTS ux_status_audit_transition ON status_audit (transition_id);
CREATE INDEX IF NOT EXISTS ix_status_audit_task ON status_audit (task_id);
CREATE TABLE IF NOT EXISTS task_runs (
    task_id          TEXT    NOT NULL,
    run_no           INTEGER NOT NULL,
    advance_id       TEXT    NOT NULL,
    schedule_version INTEGER NOT NULL,
    at_us            INTEGER NOT NULL,
    CONSTRAINT pk_task_runs PRIMARY KEY (task_id, run_no)
);
CREATE INDEX IF NOT EXISTS ix_task_runs_advance ON task_runs (advance_id);
CREATE TABLE IF NOT EXISTS taskstore_migrations (
    version    INTEGER NOT NULL PRIMARY KEY,
    applied_us INTEGER NOT NULL
);
