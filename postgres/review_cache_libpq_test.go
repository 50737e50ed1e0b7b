package postgres

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/lib/pq"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/codes"
)

// TestLibPQBadConnOnlyFromErrBadConn: ClassifyLibPQ reads a verdict as lib/pq's
// driver.ErrBadConn only when the tree holds driver.ErrBadConn, as it did
// with its second walk (codes.Is) before 052bbb8. A server error whose
// SQLSTATE is the text "bad-conn" (a proxy's, a fake server's: the code is
// whatever the wire says) gets the verdict "SQLSTATE not listed", not
// retried and not applied; 052bbb8 read the code alone and turned its phase
// to unknown with lib/pq's reason. With driver.ErrBadConn elsewhere in the
// tree, the old reading (the second walk's) is kept.
func TestLibPQBadConnOnlyFromErrBadConn(t *testing.T) {
	for _, c := range []struct {
		name    string
		err     error
		overlay bool // lib/pq's reading applies
	}{
		{"pgx", &pgconn.PgError{Code: "bad-conn"}, false},
		{"pq", &pq.Error{Code: "bad-conn"}, false},
		{"fmt/pq", fmt.Errorf("q: %w", &pq.Error{Code: "bad-conn"}), false},
		{"pq+ErrBadConn", errors.Join(&pq.Error{Code: "bad-conn"}, driver.ErrBadConn), true},
		{"ErrBadConn", driver.ErrBadConn, true},
		{"fmt/ErrBadConn", fmt.Errorf("q: %w", driver.ErrBadConn), true},
	} {
		want := Classify(c.err)
		if c.overlay {
			want.Phase = sr.Unknown
			want.Reason = "driver.ErrBadConn from lib/pq: the connection broke, but lib/pq also returns it after sending (lib/pq#939), so the command may have run"
		}
		if got := ClassifyLibPQ(c.err); got != want {
			t.Errorf("%s: ClassifyLibPQ = %+v, want %+v", c.name, got, want)
		}
	}
}

// panicky's Unwrap panics.
type panicky struct{}

func (panicky) Error() string { return "panicky" }
func (panicky) Unwrap() error { panic("Unwrap") }

// TestLibPQBadConnSecondWalkNeverPanics: the second walk, which reads past
// the server error where Classify's walk stopped, turns a panic of an
// error's method into the verdict Panicked, as Classify does (before
// 052bbb8 the panic left ClassifyLibPQ).
func TestLibPQBadConnSecondWalkNeverPanics(t *testing.T) {
	err := errors.Join(&pq.Error{Code: "bad-conn"}, panicky{})
	if got := ClassifyLibPQ(err); got != codes.Panicked {
		t.Errorf("ClassifyLibPQ = %+v, want Panicked", got)
	}
}
