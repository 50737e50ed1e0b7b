// Package faults injects database failures on purpose, so that code which
// must survive them — a retry policy, a verify-after-ambiguous-commit path, a
// reconcile loop — can be proven to, in ordinary tests.
//
// # The fault driver
//
// [Connector] wraps any database/sql driver. A [Plan] decides which calls
// fail and how: before the statement is sent, after it ran inside the
// transaction, at COMMIT (lost before it arrives, or applied with the reply
// lost), with the engine's own error type (a *pgconn.PgError 40P01, a
// *mysql.MySQLError 1213...), with latency, hanging until the context ends,
// or in an outage window on an injected clock. Rules match calls by
// operation, statement text or verb, with "nth occurrence" and "count"
// limits, or fire at seeded random rates: the same seed and the same calls
// give the same faults. Every injected fault is counted per kind and per
// statement, so a test asserts that the fault it asked for really happened:
//
//	plan := faults.MustPlan(faults.Config{Rules: []faults.Rule{
//		{Kind: faults.CommitAppliedReplyLost, Nth: 2}, // the 2nd COMMIT succeeds, its reply is lost
//		{Kind: faults.BeforeSend, Verb: "UPDATE", Count: 3},
//	}})
//	db := sql.OpenDB(faults.Connector(inner, plan)) // or faults.Open("pgx", dsn, plan)
//
//	err := store.Persist(ctx, task)   // the code under test
//	// ... assert on err, then read back what the database holds
//	if n := plan.Counts().Faults[faults.CommitAppliedReplyLost]; n != 1 {
//		t.Fatalf("got %d lost commit replies, want 1: the test proved nothing", n)
//	}
//	plan.Disable() // a clean verification phase on the same *sql.DB
//
// Under a retry layer the same plan proves the layer: a lost COMMIT reply
// must be settled by the Op's verify, never replayed blindly:
//
//	db := sql.OpenDB(faults.Connector(inner, plan))
//	err := sqlretry.RunTx(ctx, db, policy, sqlretry.Write("persist", verify), nil, persist)
//	// err == nil, exactly one row, plan.Counts().Faults[faults.CommitAppliedReplyLost] == 1
//
// The errors are what a real failure would show a classifier: a lost
// connection is a *net.OpError wrapping ECONNRESET (phase unknown), a refusal
// is driver.ErrBadConn or a refused dial (phase not sent), and all of them
// are a [*Error] underneath, so a test can also tell injected from real ones.
// A connection a fault killed is reported invalid, and database/sql replaces
// it. Remember that database/sql itself retries driver.ErrBadConn twice on a
// fresh connection outside transactions: give a BeforeSend rule a Count of 3
// if the caller must see it.
//
// # The fault proxy
//
// Package [github.com/sqlretry/sqlretry/faults/proxy] is the second tool: a
// TCP proxy in front of a real PostgreSQL or MariaDB/MySQL server, for the
// failures a driver wrapper cannot fake.
//
// The fault driver is safe for concurrent use.
package faults
