package taskstore

// queries holds every statement the store runs, bound for one dialect. They
// are constants: values always travel as parameters.
type queries struct {
	insert, get                              string
	auditCount, auditTask, insertAudit       string
	setStatus, setStatusRunning              string
	claimCandidate, claim                    string
	start, complete, fail                    string
	expired, expire                          string
	advance, insertRun, runByID              string
	naiveAdvance, naiveSetStatus, naiveStart string
	naiveComplete                            string
	ensureOccurrence, leaseOf                string
	occurrence                               string
	probeAudit, lockTask, lockGuard          string
}

const taskColumns = `id, task_key, parent_id, scheduled_us, due_us, status, job_attempts, max_attempts,
	last_execution_us, schedule_version, current_run_count, max_runs, lease_owner, lease_expires_us, payload`

// queriesFor returns the statements for dialect d, bound to its placeholders
// and locking clauses.
func queriesFor(d Dialect) *queries {
	q := sharedQueries()
	q.probeAudit = probeAuditQuery(d)
	q.ensureOccurrence = ensureOccurrenceQuery(d)
	for _, p := range []*string{&q.insert, &q.get, &q.auditCount, &q.auditTask, &q.insertAudit, &q.setStatus, &q.setStatusRunning,
		&q.claimCandidate, &q.claim, &q.start, &q.complete, &q.fail, &q.expired, &q.expire, &q.advance, &q.insertRun,
		&q.runByID, &q.naiveAdvance, &q.naiveSetStatus, &q.naiveStart, &q.naiveComplete, &q.ensureOccurrence, &q.leaseOf, &q.occurrence,
		&q.probeAudit, &q.lockTask, &q.lockGuard} {
		*p = d.bind(*p)
	}
	return q
}

// sharedQueries returns the statements whose text every dialect shares,
// written in the notation [Dialect.bind] translates.
func sharedQueries() *queries {
	return &queries{
		insert: `INSERT INTO tasks (id, task_key, parent_id, scheduled_us, due_us, status, max_attempts, max_runs, payload, created_us)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		get: `SELECT ` + taskColumns + ` FROM tasks WHERE id = ?`,

		// Every transition writes one audit row carrying its id, in the same
		// transaction, so the audit table answers "did transition X happen?".
		// A transition is matched on its id, its task and where it went, so an
		// id reused elsewhere never passes for this transition.
		auditCount: `SELECT COUNT(*) FROM status_audit WHERE transition_id = ? AND task_id = ? AND to_status IN (?, ?)`,
		auditTask:  `SELECT task_id FROM status_audit WHERE transition_id = ?`,
		// The audit row copies the status the UPDATE left, so a transition
		// whose target is decided in SQL (Fail) records what happened.
		insertAudit: `INSERT INTO status_audit (task_id, transition_id, from_status, to_status, at_us)
			SELECT id, ?, ?, status, ?i FROM tasks WHERE id = ?`,

		// SetStatus never moves into Leased, and into Running only from
		// Queued: every other move leaves the task with no lease.
		setStatus: `UPDATE tasks SET status = ?, lease_owner = NULL, lease_token = NULL, lease_expires_us = NULL
			WHERE id = ? AND status = ?`,
		setStatusRunning: `UPDATE tasks SET status = ?, last_execution_us = ? WHERE id = ? AND status = ?`,

		claimCandidate: `SELECT id FROM tasks WHERE status = 'queued' AND due_us <= ? ORDER BY due_us, id LIMIT 1 {skip}`,
		claim: `UPDATE tasks SET status = 'leased', lease_owner = ?, lease_token = ?, lease_expires_us = ?
			WHERE id = ? AND status = 'queued'`,
		// Start is where a job attempt is counted: when the handler starts.
		start: `UPDATE tasks SET status = 'running', job_attempts = job_attempts + 1, last_execution_us = ?, lease_expires_us = ?
			WHERE id = ? AND lease_token = ? AND status = 'leased'`,
		complete: `UPDATE tasks SET status = 'succeeded', lease_owner = NULL, lease_token = NULL, lease_expires_us = NULL
			WHERE id = ? AND lease_token = ? AND status = 'running'`,
		fail: `UPDATE tasks SET status = CASE WHEN job_attempts < max_attempts THEN 'queued' ELSE 'failed' END,
			due_us = ?, lease_owner = NULL, lease_token = NULL, lease_expires_us = NULL
			WHERE id = ? AND lease_token = ? AND status = 'running'`,
		expired: `SELECT id, status, lease_token FROM tasks
			WHERE status IN ('leased', 'running') AND lease_expires_us < ? ORDER BY lease_expires_us, id LIMIT ? {skip}`,
		expire: `UPDATE tasks SET status = CASE WHEN status = 'running' AND job_attempts >= max_attempts THEN 'failed' ELSE 'queued' END,
			due_us = ?, lease_owner = NULL, lease_token = NULL, lease_expires_us = NULL
			WHERE id = ? AND lease_token = ? AND lease_expires_us < ?`,

		// The advance consumes its own token: the schedule version it guards
		// on is bumped in the same statement, so the identical statement run
		// again fails its guard instead of counting the run twice.
		advance: `UPDATE tasks SET schedule_version = schedule_version + 1, current_run_count = current_run_count + 1, advanced_by = ?
			WHERE id = ? AND schedule_version = ? AND (max_runs = 0 OR current_run_count < max_runs)`,
		insertRun: `INSERT INTO task_runs (task_id, run_no, advance_id, schedule_version, at_us)
			SELECT id, current_run_count, ?, schedule_version, ?i FROM tasks WHERE id = ?`,
		leaseOf:    `SELECT lease_token, lease_expires_us FROM tasks WHERE id = ?`,
		occurrence: `SELECT ` + taskColumns + ` FROM tasks WHERE parent_id = ? AND scheduled_us = ?`,
		runByID:    `SELECT run_no, schedule_version FROM task_runs WHERE advance_id = ?`,

		// The barriers a verdict waits behind (see Store.awaitTransition and
		// Store.awaitTask), each run in a transaction that is rolled back.
		// lockTask waits for the row lock a transition's or an advance's
		// UPDATE holds until its transaction ends.
		lockTask: `SELECT id FROM tasks WHERE id = ? {share}`,
		// lockGuard checks a self-transition's guard and locks the row it
		// finds until the transaction ends (see Store.apply).
		lockGuard: `SELECT id FROM tasks WHERE id = ? AND status = ? {update}`,

		// Seed 002's unsafe shapes, for the blind-replay store only (naive.go).
		naiveAdvance: `UPDATE tasks SET current_run_count = current_run_count + 1, advanced_by = ?
			WHERE id = ? AND schedule_version = ? AND (max_runs = 0 OR current_run_count < max_runs)`,
		naiveSetStatus: `UPDATE tasks SET status = ?, last_execution_us = ? WHERE id = ?`,
		naiveStart: `UPDATE tasks SET status = 'running', job_attempts = job_attempts + 1, last_execution_us = ?, lease_expires_us = ?
			WHERE id = ?`,
		naiveComplete: `UPDATE tasks SET status = 'succeeded', lease_owner = NULL, lease_token = NULL, lease_expires_us = NULL
			WHERE id = ?`,
	}
}

// probeAuditQuery inserts a row under a transition id, to wait for the
// unique-index entry a transaction in flight holds for the same id: an
// insert that meets an uncommitted duplicate waits until its inserter ends.
// The collision is ignored, not an error (PostgreSQL would abort the
// transaction and log it), and the row is never committed.
func probeAuditQuery(d Dialect) string {
	switch d {
	case Postgres:
		return `INSERT INTO status_audit (task_id, transition_id, from_status, to_status, at_us)
			VALUES ('', ?, '', '', 0) ON CONFLICT (transition_id) DO NOTHING`
	case MariaDB:
		return `INSERT IGNORE INTO status_audit (task_id, transition_id, from_status, to_status, at_us)
			VALUES ('', ?, '', '', 0)`
	}
	return `INSERT OR IGNORE INTO status_audit (task_id, transition_id, from_status, to_status, at_us)
			VALUES ('', ?, '', '', 0)`
}

// ensureOccurrenceQuery is an idempotent insert: the occurrence index makes
// a replay a no-op. MariaDB's ON DUPLICATE KEY UPDATE would absorb a
// collision on any unique key, the primary key included, so there the
// insert is plain and EnsureOccurrence reads a duplicate key back by
// occurrence.
func ensureOccurrenceQuery(d Dialect) string {
	if d == MariaDB {
		return `INSERT INTO tasks (id, task_key, parent_id, scheduled_us, due_us, status, max_attempts, max_runs, payload, created_us)
			VALUES (?, NULL, ?, ?, ?, 'queued', ?, 0, ?, ?)`
	}
	return `INSERT INTO tasks (id, task_key, parent_id, scheduled_us, due_us, status, max_attempts, max_runs, payload, created_us)
			VALUES (?, NULL, ?, ?, ?, 'queued', ?, 0, ?, ?) ON CONFLICT (parent_id, scheduled_us) DO NOTHING`
}
