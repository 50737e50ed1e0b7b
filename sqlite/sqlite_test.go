package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	modernc "modernc.org/sqlite"

	sr "github.com/sqlretry/sqlretry"
)

// modernc.org/sqlite's *Error has unexported fields: real ones are provoked
// below. fakeCoder stands for one in the table-wide test; the provoked ones
// check the stand-in is faithful.
type fakeCoder struct{ code int }

func (e *fakeCoder) Error() string { return "sqlite error " + itoa(e.code) }
func (e *fakeCoder) Code() int     { return e.code }

func TestClassifyEveryEntry(t *testing.T) {
	rows := Table()
	if len(rows) < 40 {
		t.Fatalf("table has %d rows, want at least 40", len(rows))
	}
	for _, e := range rows {
		if e.Source == "" || e.Class.Reason == "" || !strings.HasPrefix(e.Class.Code, "SQLITE_") {
			t.Errorf("%s: row has no source or reason, or a Class.Code %q", e.Code, e.Class.Code)
		}
		errs := map[string]error{
			"bare":    &fakeCoder{e.Number},
			"wrapped": fmt.Errorf("exec: %w", &fakeCoder{e.Number}),
			"joined":  errors.Join(errors.New("other"), &fakeCoder{e.Number}),
			"mattn":   Error{Code: mattnErrNo(e.Number & 0xff), ExtendedCode: mattnErrNoExtended(e.Number)},
		}
		for kind, err := range errs {
			got := classify(err, testPkg)
			if got != e.Class {
				t.Errorf("%s %s: got %+v, want %+v", e.Code, kind, got, e.Class)
			}
		}
	}
}

// mattnErrNo and mattnErrNoExtended mirror mattn/go-sqlite3's code types.
type (
	mattnErrNo         int
	mattnErrNoExtended int
)

var testPkg = reflect.TypeOf(Error{}).PkgPath()

func TestMattnCode(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want int
		ok   bool
	}{
		{"extended", Error{Code: 5, ExtendedCode: 517}, 517, true},
		{"primary only", Error{Code: 19}, 19, true},
		{"wrapped", fmt.Errorf("x: %w", Error{Code: 6, ExtendedCode: 262}), 262, true},
		{"joined", errors.Join(io.EOF, Error{Code: 5}), 5, true},
		{"other type", &fakeCoder{5}, 0, false}, // not named Error
		{"foreign", errors.New("x"), 0, false},
	}
	for _, c := range cases {
		got, ok := mattnCode(c.err, testPkg)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: got (%d, %v), want (%d, %v)", c.name, got, ok, c.want, c.ok)
		}
	}
	if _, ok := mattnCode(Error{Code: 5}, mattnPkg); ok {
		t.Error("a type outside mattn's package was read as mattn's")
	}
}

// Error mirrors mattn/go-sqlite3's Error under its exact type name.
type Error struct {
	Code         mattnErrNo
	ExtendedCode mattnErrNoExtended
}

func (e Error) Error() string { return "mirror" }

func TestClassifyNamedCodes(t *testing.T) {
	cases := []struct {
		code      int
		retryable bool
		name      string
	}{
		{5, true, "SQLITE_BUSY"},
		{261, true, "SQLITE_BUSY_RECOVERY"},
		{773, true, "SQLITE_BUSY_TIMEOUT"},
		{517, true, "SQLITE_BUSY_SNAPSHOT"},
		{6, true, "SQLITE_LOCKED"},
		{262, true, "SQLITE_LOCKED_SHAREDCACHE"},
		{518, true, "SQLITE_LOCKED"}, // LOCKED_VTAB, read as its primary
		{19, false, "SQLITE_CONSTRAINT"},
		{2067, false, "SQLITE_CONSTRAINT_UNIQUE"},
		{1555, false, "SQLITE_CONSTRAINT_PRIMARYKEY"},
		{787, false, "SQLITE_CONSTRAINT_FOREIGNKEY"},
		{1299, false, "SQLITE_CONSTRAINT_NOTNULL"},
		{4115, false, "SQLITE_CONSTRAINT"}, // an extended constraint code not yet invented
		{1, false, "SQLITE_ERROR"},
		{266, false, "SQLITE_IOERR"}, // IOERR_READ
		{17, false, "SQLITE_SCHEMA"},
		{99, false, "SQLITE_RC_99"},
	}
	for _, c := range cases {
		got := Classify(&fakeCoder{c.code})
		if got.Retryable != c.retryable || got.Phase != sr.NotApplied || got.Code != c.name {
			t.Errorf("%d: got {Retryable:%v Phase:%v Code:%q}, want {Retryable:%v Phase:not-applied Code:%q}",
				c.code, got.Retryable, got.Phase, got.Code, c.retryable, c.name)
		}
	}
	if r := Classify(&fakeCoder{517}).Reason; !strings.Contains(r, "only a whole-transaction retry can succeed") {
		t.Errorf("517 reason %q: want it to say only a whole-transaction retry can succeed", r)
	}
}

func open(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestClassifyRealModerncErrors provokes real modernc.org/sqlite errors.
func TestClassifyRealModerncErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	check := func(t *testing.T, err error, wantCode string, wantRetryable bool) {
		t.Helper()
		var me *modernc.Error
		if !errors.As(err, &me) {
			t.Fatalf("got %T %v, want a *sqlite.Error", err, err)
		}
		if got := Classify(err); got.Code != wantCode || got.Retryable != wantRetryable || got.Phase != sr.NotApplied {
			t.Errorf("%v (code %d): got {Retryable:%v Phase:%v Code:%q}, want {Retryable:%v Phase:not-applied Code:%q}",
				err, me.Code(), got.Retryable, got.Phase, got.Code, wantRetryable, wantCode)
		}
	}
	mustExec := func(t *testing.T, ex interface {
		ExecContext(context.Context, string, ...any) (sql.Result, error)
	}, q string) {
		t.Helper()
		if _, err := ex.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	t.Run("unique", func(t *testing.T) {
		db := open(t, "file::memory:")
		db.SetMaxOpenConns(1)
		mustExec(t, db, "create table t (id integer primary key, v text unique)")
		mustExec(t, db, "insert into t (v) values ('a')")
		_, err := db.ExecContext(ctx, "insert into t (v) values ('a')")
		check(t, err, "SQLITE_CONSTRAINT_UNIQUE", false)
		_, err = db.ExecContext(ctx, "insert into t (id, v) values (1, 'b')")
		check(t, err, "SQLITE_CONSTRAINT_PRIMARYKEY", false)
		_, err = db.ExecContext(ctx, "select * from missing")
		check(t, err, "SQLITE_ERROR", false)
	})

	dir := t.TempDir()
	t.Run("busy", func(t *testing.T) {
		dsn := "file:" + filepath.Join(dir, "busy.db") + "?_pragma=busy_timeout(0)"
		a, b := open(t, dsn), open(t, dsn)
		mustExec(t, a, "create table t (v int)")
		ca, err := a.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer ca.Close()
		mustExec(t, ca, "begin exclusive")
		defer ca.ExecContext(ctx, "rollback")
		_, err = b.ExecContext(ctx, "insert into t values (1)")
		check(t, err, "SQLITE_BUSY", true)
	})
	t.Run("busy snapshot", func(t *testing.T) {
		dsn := "file:" + filepath.Join(dir, "snap.db") + "?_pragma=busy_timeout(0)&_pragma=journal_mode(wal)"
		a, b := open(t, dsn), open(t, dsn)
		mustExec(t, a, "create table t (v int)")
		ca, err := a.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer ca.Close()
		mustExec(t, ca, "begin")
		defer ca.ExecContext(ctx, "rollback")
		var n int
		if err := ca.QueryRowContext(ctx, "select count(*) from t").Scan(&n); err != nil {
			t.Fatal(err)
		}
		mustExec(t, b, "insert into t values (1)") // another connection writes
		_, err = ca.ExecContext(ctx, "insert into t values (2)")
		check(t, err, "SQLITE_BUSY_SNAPSHOT", true)
	})
	t.Run("locked", func(t *testing.T) {
		db := open(t, "file:"+filepath.Join(dir, "locked.db"))
		mustExec(t, db, "create table t (v int)")
		mustExec(t, db, "insert into t values (1), (2)")
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		rows, err := c.QueryContext(ctx, "select v from t")
		if err != nil {
			t.Fatal(err)
		}
		rows.Next()
		_, err = c.ExecContext(ctx, "drop table t")
		rows.Close()
		check(t, err, "SQLITE_LOCKED", true)
	})
}

func TestClassifyNeverPanics(t *testing.T) {
	var nilErr *modernc.Error
	var nilFake *fakeCoder
	errs := []error{nil, nilErr, nilFake, errors.New("foreign"), errors.Join(), errors.Join(nil, errors.New("x")), fmt.Errorf("wrap nil: %w", nil)}
	for i, err := range errs {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("case %d (%T): panicked: %v", i, err, r)
				}
			}()
			Classify(err)
		}()
	}
}

func TestClassifyFallsBackToNeutral(t *testing.T) {
	for _, err := range []error{nil, errors.New("foreign"), io.EOF, context.Canceled} {
		want := sr.ClassifyNeutral(err)
		want.Ended = true // SQLite's attempts end in the caller's process
		if got := Classify(err); got != want {
			t.Errorf("Classify(%v): got %+v, want the neutral %+v", err, got, want)
		}
	}
}

// A verify after a SQLite failure reads a final answer: every verdict says
// the attempt ended, including the command timeout's (the Policy asks the
// classifier) and an interrupted statement's.
func TestClassifyEveryVerdictEnded(t *testing.T) {
	for _, err := range []error{nil, errors.New("foreign"), io.EOF, context.DeadlineExceeded} {
		if !Classify(err).Ended {
			t.Errorf("Classify(%v).Ended = false", err)
		}
	}
}

func TestLookupAndValidCode(t *testing.T) {
	cases := []struct {
		code      string
		valid     bool
		ok        bool
		retryable bool
		name      string
	}{
		{"5", true, true, true, "SQLITE_BUSY"},
		{"517", true, true, true, "SQLITE_BUSY_SNAPSHOT"},
		{"SQLITE_BUSY_SNAPSHOT", true, true, true, "SQLITE_BUSY_SNAPSHOT"},
		{"sqlite_locked", true, true, true, "SQLITE_LOCKED"},
		{"2067", true, true, false, "SQLITE_CONSTRAINT_UNIQUE"},
		{"266", true, true, false, "SQLITE_IOERR"},
		{"SQLITE_SCHEMA", true, false, false, "SQLITE_SCHEMA"},
		{"0", true, false, false, "SQLITE_RC_0"},
		{"", false, false, false, ""},
		{"SQLITE_NOPE", false, false, false, "SQLITE_NOPE"},
		{"5x", false, false, false, "5x"},
		{"-5", false, false, false, "-5"},
		{"70000", false, false, false, "70000"},
	}
	for _, c := range cases {
		err := ValidCode(c.code)
		if (err == nil) != c.valid {
			t.Errorf("ValidCode(%q): got %v, want valid=%v", c.code, err, c.valid)
		}
		got, ok := Lookup(c.code)
		if ok != c.ok || got.Retryable != c.retryable || got.Code != c.name {
			t.Errorf("Lookup(%q): got ({Retryable:%v Code:%q}, %v), want ({Retryable:%v Code:%q}, %v)", c.code, got.Retryable, got.Code, ok, c.retryable, c.name, c.ok)
		}
	}
}

func TestTableSortedAndFresh(t *testing.T) {
	rows := Table()
	for i := 1; i < len(rows); i++ {
		if rows[i-1].Number >= rows[i].Number {
			t.Errorf("rows %d and %d out of order or duplicated", rows[i-1].Number, rows[i].Number)
		}
	}
	rows[0].Code = "mutated"
	if Table()[0].Code == "mutated" {
		t.Error("Table returned the package's own slice; want a fresh copy")
	}
}

var sink sr.Class

func BenchmarkClassify(b *testing.B) {
	// A real modernc SQLITE_BUSY error.
	dir := b.TempDir()
	dsn := "file:" + filepath.Join(dir, "bench.db") + "?_pragma=busy_timeout(0)"
	a, _ := sql.Open("sqlite", dsn)
	defer a.Close()
	o, _ := sql.Open("sqlite", dsn)
	defer o.Close()
	ctx := context.Background()
	a.ExecContext(ctx, "create table t (v int)")
	c, err := a.Conn(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	c.ExecContext(ctx, "begin exclusive")
	_, busy := o.ExecContext(ctx, "insert into t values (1)")
	c.ExecContext(ctx, "rollback")
	if got := Classify(busy); got.Code != "SQLITE_BUSY" {
		b.Fatalf("setup: got %+v for %v, want SQLITE_BUSY", got, busy)
	}
	cases := []struct {
		name     string
		classify func(error) sr.Class
		err      error
	}{
		{"transient/modernc-BUSY", Classify, busy},
		{"transient/BUSY_SNAPSHOT-wrapped", Classify, fmt.Errorf("tx: %w", &fakeCoder{517})},
		{"foreign", Classify, errors.New("boom")},
		{"neutral-baseline/foreign", sr.ClassifyNeutral, errors.New("boom")},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sink = c.classify(c.err)
			}
		})
	}
}
