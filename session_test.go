package sqlretry

import (
	"context"
	"database/sql/driver"
	"testing"
)

// The session tracker knows every text that leaves a session inside a
// transaction (or with autocommit off) on MySQL/MariaDB and SQL Server, so
// a deadlock victim's statement after one is not replayed alone. Each
// opener was checked on MariaDB 10.11 (@@in_transaction or @@autocommit);
// TestSQLTextTransactionNotReplayedMariaDB runs them on the real server.
//
// History: found in the review of issue 12's changes (finding 2): the
// tracker read these texts as "outside a transaction".
func TestSQLTextTransactionOpenersAreTracked(t *testing.T) {
	for _, tc := range []struct {
		name    string
		openers []string
		init    func(ctx context.Context, c driver.Conn) error
	}{
		// MySQL: SET autocommit=1 commits only when autocommit was 0; inside
		// START TRANSACTION with autocommit already 1 it is a no-op, and
		// the transaction stays open.
		{name: "START TRANSACTION then SET autocommit=1", openers: []string{"START TRANSACTION", "SET autocommit=1"}},
		// SQL Server: SET IMPLICIT_TRANSACTIONS OFF does not end an open
		// transaction.
		{name: "BEGIN TRAN then SET IMPLICIT_TRANSACTIONS OFF", openers: []string{"BEGIN TRAN", "SET IMPLICIT_TRANSACTIONS OFF"}},
		// A quoted variable name: TxControl is false, After is never asked.
		{name: "SET `autocommit` = 0", openers: []string{"SET `autocommit` = 0"}},
		// MySQL runs the body of an executable comment.
		{name: "/*!START TRANSACTION*/", openers: []string{"/*!START TRANSACTION*/"}},
		{name: "/*!40101 SET autocommit=0 */", openers: []string{"/*!40101 SET autocommit=0 */"}},
		// MariaDB: SET STATEMENT … FOR <statement> runs the statement.
		{name: "SET STATEMENT … FOR START TRANSACTION", openers: []string{"SET STATEMENT max_statement_time=10 FOR START TRANSACTION"}},
		// completion_type=CHAIN: a plain COMMIT opens the next transaction.
		{name: "completion_type CHAIN then COMMIT", openers: []string{"SET completion_type = 'CHAIN'", "START TRANSACTION", "COMMIT"}},
		// MySQL: a procedure may SET autocommit=0 (session state that
		// outlives the CALL); a plain ROLLBACK then clears txUnsure, and
		// nothing says autocommit is still off.
		{name: "CALL of a procedure that sets autocommit=0, then ROLLBACK", openers: []string{"CALL set_autocommit_off", "ROLLBACK"}},
		// A session whose autocommit is off from the start is read with
		// SELECT @@autocommit on MySQL and MariaDB (the only engines where
		// it can be): see the real-server test. On a driver the Connector
		// does not know (this fake), SessionInit must not turn it off; the
		// Config.SessionInit doc says so.
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newFakeServer()
			db, _ := openPassthrough(t, srv, Config{SessionInit: tc.init})
			conn := heldConn(t, db)
			ctx := context.Background()
			for _, q := range tc.openers {
				if _, err := conn.ExecContext(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			srv.addFaults(&fault{op: "exec", match: "ADD n 1", err: errDeadlock})
			_, err := conn.ExecContext(ctx, "ADD n 1")
			if n := srv.count("exec ADD n 1"); n != 1 || err == nil {
				t.Errorf("got %v after %d executions, want the deadlock returned after 1: the statement was replayed alone inside a transaction", err, n)
			}
		})
	}
}
