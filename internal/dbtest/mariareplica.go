package dbtest

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// mariaReplicaTimeout bounds waiting for the replica to run, to catch up
// and to be promoted.
const mariaReplicaTimeout = 30 * time.Second

// A MariaDBReplica is a throwaway MariaDB primary and a replica of it (GTID
// replication, CHANGE MASTER TO ... MASTER_USE_GTID=slave_pos), each a
// [Server] of the test's, killed and removed at cleanup. Both write a
// binary log (ROW format), so the replica can become a primary.
type MariaDBReplica struct {
	Primary, Replica *Server
}

// MariaDBReplicaOptions adjusts a [MariaDBReplica].
type MariaDBReplicaOptions struct {
	// SemiSync turns on semi-synchronous replication (the built-in
	// rpl_semi_sync_* of MariaDB 10.3 and later, wait point AFTER_SYNC): a
	// COMMIT returns once the replica has the transaction in its relay log.
	SemiSync bool
}

// StartMariaDBReplica starts a primary and a replica of it and waits until
// the replica's two threads run.
func StartMariaDBReplica(t TB, opts MariaDBReplicaOptions) *MariaDBReplica {
	t.Helper()
	primary, replica := map[string]string{"server-id": "1"}, map[string]string{"server-id": "2"}
	if opts.SemiSync {
		primary["rpl-semi-sync-master-enabled"] = "ON"
		primary["rpl-semi-sync-master-wait-point"] = "AFTER_SYNC"
		primary["rpl-semi-sync-master-timeout"] = "60000" // ms: no quiet fallback to async within a test
		replica["rpl-semi-sync-slave-enabled"] = "ON"
	}
	r := &MariaDBReplica{Primary: startMariaDBBinlog(t, primary)}
	if r.Primary == nil {
		return nil // skipped
	}
	r.Replica = startMariaDBBinlog(t, replica)
	ctx, cancel := context.WithTimeout(context.Background(), mariaReplicaTimeout)
	defer cancel()
	change := fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%d, MASTER_USER='root', MASTER_PASSWORD='', "+
		"MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1", r.Primary.port)
	if err := adminExec(ctx, "mysql", r.Replica.DSN(), change, "START SLAVE"); err != nil {
		t.Fatalf("dbtest: start the replica: %v", err)
	}
	if err := r.waitRunning(ctx, "ON"); err != nil {
		t.Fatalf("dbtest: %v\nreplica log:\n%s", err, r.Replica.logSince(0))
	}
	return r
}

// startMariaDBBinlog starts a throwaway MariaDB server as [StartMariaDB]
// does, but writing a binary log, with extra settings.
func startMariaDBBinlog(t TB, extra map[string]string) *Server {
	t.Helper()
	m, ok := findMariaDB(t)
	if !ok {
		return nil // skipped
	}
	settings := map[string]string{"log-bin": "mysql-bin", "binlog-format": "ROW", "log-slave-updates": ""}
	for k, v := range mariadbDefaults {
		if k != "skip-log-bin" {
			settings[k] = v
		}
	}
	return launch(t, m.newServer(t, "sqlretry-my-repl-", mergeSettings(settings, extra)))
}

// StopReceiving stops the replica's I/O thread (STOP SLAVE IO_THREAD): it
// falls behind the primary, and with semi-synchronous replication the
// primary's COMMITs wait for it.
func (r *MariaDBReplica) StopReceiving(ctx context.Context) error {
	return adminExec(ctx, "mysql", r.Replica.DSN(), "STOP SLAVE IO_THREAD")
}

// Promote makes the replica a primary, as after its primary died: it waits
// until the replica has applied everything it received, then STOP SLAVE,
// RESET SLAVE ALL, and read_only off.
func (r *MariaDBReplica) Promote(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, mariaReplicaTimeout)
	defer cancel()
	db, err := sql.Open("mysql", r.Replica.DSN())
	if err != nil {
		return err
	}
	defer db.Close()
	for {
		st, err := slaveStatus(ctx, db)
		if err != nil {
			return err
		}
		// Received (Gtid_IO_Pos) and applied (gtid_slave_pos) agree, and
		// the SQL thread has nothing left in the relay log.
		var applied string
		if err := db.QueryRowContext(ctx, "SELECT @@gtid_slave_pos").Scan(&applied); err != nil {
			return err
		}
		if st["Gtid_IO_Pos"] == applied && strings.HasPrefix(st["Slave_SQL_Running_State"], "Slave has read all relay log") {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("dbtest: the replica did not apply what it received (received %s, applied %s): %w", st["Gtid_IO_Pos"], applied, ctx.Err())
		case <-time.After(pollInterval):
		}
	}
	return adminExec(ctx, "mysql", r.Replica.DSN(), "STOP SLAVE", "RESET SLAVE ALL", "SET GLOBAL read_only = OFF")
}

// waitRunning waits until the replica's Slave_running status is want.
func (r *MariaDBReplica) waitRunning(ctx context.Context, want string) error {
	db, err := sql.Open("mysql", r.Replica.DSN())
	if err != nil {
		return err
	}
	defer db.Close()
	var got string
	for {
		err := db.QueryRowContext(ctx, "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'SLAVE_RUNNING'").Scan(&got)
		if err == nil && got == want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("dbtest: replica Slave_running = %q (error %v), want %s: %w", got, err, want, ctx.Err())
		case <-time.After(pollInterval):
		}
	}
}

// slaveStatus returns SHOW SLAVE STATUS as column name to value ("" when
// the replica has no primary configured).
func slaveStatus(ctx context.Context, db *sql.DB) (map[string]string, error) {
	rows, err := db.QueryContext(ctx, "SHOW SLAVE STATUS")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(cols))
	if !rows.Next() {
		return out, rows.Err()
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return nil, err
	}
	for i, c := range cols {
		out[c] = vals[i].String
	}
	return out, rows.Err()
}
