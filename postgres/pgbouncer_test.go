package postgres

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/lib/pq"

	sr "github.com/sqlretry/sqlretry"
)

// TestClassifyPgBouncerErrors: pgbouncer's own errors, FATAL 08P01 with
// its exact message, are transient, of phase NotSent where the client's
// query reached no server (refused at login, or no server linked to the
// client) and Unknown where pgbouncer closed a server the client was
// linked to. Before, each got 08P01's verdict: not retryable, so a call
// failed at once with an error a retry would have survived.
func TestClassifyPgBouncerErrors(t *testing.T) {
	for _, tc := range []struct {
		msg   string
		phase sr.Phase
	}{
		{"no more connections allowed (max_client_conn)", sr.NotSent},
		{"client connections exceeded (max_db_client_connections)", sr.NotSent},
		{"client connections exceeded (max_user_client_connections)", sr.NotSent},
		{"client_login_timeout", sr.NotSent},
		{"client_login_timeout (server down)", sr.NotSent},
		{"pooler is shutting down", sr.NotSent},
		{"server login has been failing, try again later (server_login_retry)", sr.NotSent},
		{"server login has been failing, cached error: connect failed (server_login_retry)", sr.NotSent},
		{"pgbouncer cannot connect to server", sr.NotSent},
		{"query_wait_timeout", sr.NotSent},
		{"query_timeout", sr.NotSent},
		{"client_idle_timeout", sr.NotSent},
		{"server shutting down", sr.NotSent},
		{"server conn crashed?", sr.Unknown},
		{"database removed", sr.Unknown},
		{"query timeout", sr.Unknown},
		{"idle transaction timeout", sr.Unknown},
		{"database configuration changed", sr.Unknown},
	} {
		for _, e := range []error{
			&pgconn.PgError{Severity: "FATAL", Code: "08P01", Message: tc.msg},
			&pq.Error{Severity: "FATAL", Code: "08P01", Message: tc.msg},
			fmt.Errorf("exec: %w", &pgconn.PgError{Severity: "FATAL", Code: "08P01", Message: tc.msg}),
		} {
			for name, classify := range map[string]func(error) sr.Class{"pg": Classify, "libpq": ClassifyLibPQ, "crdb": ClassifyCockroach} {
				got := classify(e)
				if !got.Retryable || got.Phase != tc.phase || got.Code != "08P01" || got.Kind != sr.Unavailable || !strings.Contains(got.Reason, "pgbouncer: "+strings.SplitN(tc.msg, ",", 2)[0]) {
					t.Errorf("%s %T %q: got %+v, want retryable, %v, 08P01, unavailable, a pgbouncer reason", name, e, tc.msg, got, tc.phase)
				}
			}
		}
	}
}

// TestClassifyPgBouncerTextOnlyFromPgBouncer: the texts are read only
// where pgbouncer alone sends them, FATAL 08P01. A server's own
// protocol_violation, an ERROR (a user's RAISE can send any code and
// text, but not FATAL), another code, or a message that only begins or
// ends like one keeps its own verdict.
func TestClassifyPgBouncerTextOnlyFromPgBouncer(t *testing.T) {
	perm08P01 := Classify(&pgconn.PgError{Code: "08P01"})
	for _, e := range []error{
		&pgconn.PgError{Severity: "FATAL", Code: "08P01", Message: "invalid frontend message type 0"},
		&pgconn.PgError{Severity: "ERROR", Code: "08P01", Message: "server conn crashed?"},
		&pgconn.PgError{Severity: "ERROR", Code: "08P01", Message: "query_wait_timeout"},
		&pgconn.PgError{Severity: "FATAL", Code: "08P01", Message: "server conn crashed? no"},
		&pgconn.PgError{Severity: "FATAL", Code: "08P01", Message: "database removed from the catalog"},
		&pgconn.PgError{Severity: "FATAL", Code: "08P01", Message: "a query_wait_timeout"},
		&pq.Error{Severity: "ERROR", Code: "08P01", Message: "no more connections allowed (max_client_conn)"},
	} {
		if got := Classify(e); got.Retryable != perm08P01.Retryable || got.Phase != perm08P01.Phase || got.Reason != perm08P01.Reason {
			t.Errorf("%v: got %+v, want 08P01's own verdict %+v", e, got, perm08P01)
		}
	}
	if got, want := Classify(&pgconn.PgError{Severity: "FATAL", Code: "57P01", Message: "server conn crashed?"}), Classify(&pgconn.PgError{Code: "57P01"}); got.Reason != want.Reason {
		t.Errorf("57P01 with pgbouncer's text: got %+v, want 57P01's verdict", got)
	}
}

// TestClassifyPgBouncerAtStartup: in reply to the connection's startup,
// inside a *pgconn.ConnectError, every one is not sent, and still
// transient (max_client_conn at login was permanent before).
func TestClassifyPgBouncerAtStartup(t *testing.T) {
	for _, msg := range []string{"no more connections allowed (max_client_conn)", "server conn crashed?", "database removed"} {
		err := realStartupError(t, "08P01", msg)
		if got := Classify(err); !got.Retryable || got.Phase != sr.NotSent {
			t.Errorf("%q at startup: got %+v, want retryable and not sent", msg, got)
		}
	}
}

// TestClassifyPgBouncerAllocatesNothing: reading the severity and message
// costs no allocation, for either driver's error.
func TestClassifyPgBouncerAllocatesNothing(t *testing.T) {
	for _, e := range []error{
		&pgconn.PgError{Severity: "FATAL", Code: "08P01", Message: "server conn crashed?"},
		&pq.Error{Severity: "FATAL", Code: "08P01", Message: "query_wait_timeout"},
		&pgconn.PgError{Severity: "FATAL", Code: "08P01", Message: "invalid frontend message type 0"},
	} {
		classSink = Classify(e) // the type's fields found once
		if n := testing.AllocsPerRun(50, func() { classSink = Classify(e) }); n != 0 {
			t.Errorf("%v: %v allocations a call, want 0", e, n)
		}
	}
}
