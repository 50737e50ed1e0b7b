package sqlretry

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lib/pq"
)

// openWrapped returns a database/sql handle on a fake server through the
// Connector, with MaxRetries 2 unless c says otherwise.
func openWrapped(t *testing.T, srv *fakeServer, c Config) (*sql.DB, *Policy) {
	t.Helper()
	if c.MaxRetries == 0 {
		c.MaxRetries = 2
	}
	p := testPolicy(t, c)
	db := sql.OpenDB(Connector(&fakeConnector{s: srv}, p))
	t.Cleanup(func() { db.Close() })
	return db, p
}

// consentAll is a Schedule that consents to replaying every statement.
type consentAll struct{}

func (consentAll) Decide(Failure) (Decision, time.Duration) { return Defer, 0 }
func (consentAll) ConsentsToReplay(string, string) bool     { return true }

func TestConnectorStatements(t *testing.T) {
	tests := []struct {
		name      string
		faults    []*fault
		sched     Schedule
		stmt      string // exec unless it starts with SELECT or GET
		wantErr   error
		wantN     int64 // n after the call
		wantCalls int   // exec or query calls that reached the server
		wantConns int   // connections opened
	}{
		{name: "deadlock victim write is retried",
			faults: []*fault{{op: "exec", err: errDeadlock}}, stmt: "ADD n 1", wantN: 1, wantCalls: 2, wantConns: 1},
		{name: "ambiguous write is not replayed",
			faults: []*fault{{op: "exec", err: errLost, apply: true}}, stmt: "ADD n 1",
			wantErr: ErrAmbiguous, wantN: 1, wantCalls: 1, wantConns: 1},
		{name: "ambiguous write is replayed with the schedule's consent",
			faults: []*fault{{op: "exec", err: errLost, apply: true}}, sched: consentAll{}, stmt: "ADD n 1",
			wantN: 2, wantCalls: 2, wantConns: 1},
		{name: "ambiguous read-only query is replayed",
			faults: []*fault{{op: "query", err: errLost}}, stmt: "SELECT n", wantCalls: 2, wantConns: 1},
		{name: "ambiguous read IsReadOnly cannot see is not replayed",
			faults: []*fault{{op: "query", err: errLost}}, stmt: "GET n", wantErr: ErrAmbiguous, wantCalls: 1, wantConns: 1},
		{name: "lost connection, not sent: reconnect underneath and retry the write",
			faults: []*fault{{op: "exec", err: driver.ErrBadConn, kill: true}}, stmt: "ADD n 1", wantN: 1, wantCalls: 2, wantConns: 2},
		{name: "lost connection, ambiguous: the read retries on a new connection",
			faults: []*fault{{op: "query", err: errLost, kill: true}}, stmt: "SELECT n", wantCalls: 2, wantConns: 2},
		{name: "reconnect refused once, then the write goes through",
			faults: []*fault{{op: "exec", err: driver.ErrBadConn, kill: true}, {op: "connect", err: errRefused}},
			stmt:   "ADD n 1", wantN: 1, wantCalls: 2, wantConns: 2},
		{name: "permanent error is returned after one attempt",
			faults: []*fault{{op: "exec", err: errSyntax}}, stmt: "ADD n 1", wantErr: errSyntax, wantCalls: 1, wantConns: 1},
		{name: "retries are bounded and database/sql does not add its own",
			faults: []*fault{{op: "exec", err: driver.ErrBadConn, kill: true, times: 10}}, stmt: "ADD n 1",
			wantErr: ErrRetriesExhausted, wantCalls: 3, wantConns: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newFakeServer()
			db, _ := openWrapped(t, srv, Config{Schedule: tt.sched})
			ctx := context.Background()
			if err := db.PingContext(ctx); err != nil { // open the first connection before the faults
				t.Fatal(err)
			}
			srv.addFaults(tt.faults...)
			var err error
			kind := "exec"
			if strings.HasPrefix(tt.stmt, "SELECT") || strings.HasPrefix(tt.stmt, "GET") {
				kind = "query"
				var v int64
				err = db.QueryRowContext(ctx, tt.stmt).Scan(&v)
			} else {
				_, err = db.ExecContext(ctx, tt.stmt)
			}
			if tt.wantErr == nil && err != nil || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("got error %v, want %v", err, tt.wantErr)
			}
			if errors.Is(err, driver.ErrBadConn) {
				t.Errorf("got an error matching driver.ErrBadConn (%v): database/sql would retry it again", err)
			}
			if got := srv.get("n"); got != tt.wantN {
				t.Errorf("got n = %d, want %d", got, tt.wantN)
			}
			if got := srv.count(kind + " "); got != tt.wantCalls {
				t.Errorf("got %d %s calls, want %d", got, kind, tt.wantCalls)
			}
			if got := srv.opened; got != tt.wantConns {
				t.Errorf("got %d connections opened, want %d", got, tt.wantConns)
			}
		})
	}
}

func TestConnectorConnect(t *testing.T) {
	tests := []struct {
		name     string
		faults   []*fault
		wantErr  error
		attempts int
	}{
		{name: "refused twice, then connected", faults: []*fault{{op: "connect", err: errRefused, times: 2}}, attempts: 3},
		{name: "authentication failure is not retried", faults: []*fault{{op: "connect", err: errAuth, times: 5}},
			wantErr: errAuth, attempts: 1},
		{name: "retries are bounded", faults: []*fault{{op: "connect", err: errRefused, times: 10}},
			wantErr: ErrRetriesExhausted, attempts: 3},
		{name: "ErrBadConn from Connect is retried by the Policy only",
			faults: []*fault{{op: "connect", err: driver.ErrBadConn, times: 10}}, wantErr: ErrRetriesExhausted, attempts: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newFakeServer(tt.faults...)
			db, _ := openWrapped(t, srv, Config{})
			err := db.PingContext(context.Background())
			if tt.wantErr == nil && err != nil || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("got error %v, want %v", err, tt.wantErr)
			}
			if got := srv.count("connect"); got != tt.attempts {
				t.Errorf("got %d connect attempts, want %d", got, tt.attempts)
			}
		})
	}
}

func TestConnectorConnectSchedule(t *testing.T) {
	srv := newFakeServer(&fault{op: "connect", err: errAuth, times: 5})
	var seen []Failure
	sched := ScheduleFunc(func(f Failure) (Decision, time.Duration) {
		seen = append(seen, f)
		if f.Retry < 2 {
			return Retry, 0
		}
		return Stop, 0
	})
	db, _ := openWrapped(t, srv, Config{ConnectSchedule: sched})
	err := db.PingContext(context.Background())
	if !errors.Is(err, errAuth) {
		t.Fatalf("got %v, want the authentication error", err)
	}
	if got := srv.count("connect"); got != 2 {
		t.Errorf("got %d connect attempts, want 2 (the connect schedule decides)", got)
	}
	if len(seen) != 2 || seen[0].Op != "connect" {
		t.Errorf("got failures %+v, want 2 for op connect", seen)
	}
}

func TestConnectorPooledConnKilled(t *testing.T) {
	for _, reset := range []bool{true, false} {
		t.Run("resetter="+map[bool]string{true: "yes", false: "no"}[reset], func(t *testing.T) {
			srv := newFakeServer()
			p := testPolicy(t, Config{MaxRetries: 2})
			fc := &fakeConnector{s: srv}
			if !reset {
				fc.mk = func(c *fakeConn) driver.Conn { return pingConn{minConn{c}} }
			}
			db := sql.OpenDB(Connector(fc, p))
			defer db.Close()
			ctx := context.Background()
			var v int64
			if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&v); err != nil {
				t.Fatal(err)
			}
			srv.kill() // the server ends the idle pooled connection
			if _, err := db.ExecContext(ctx, "ADD n 5"); err != nil {
				t.Fatalf("got %v, want the write to go through on a new connection", err)
			}
			if err := db.QueryRowContext(ctx, "SELECT n").Scan(&v); err != nil || v != 5 {
				t.Fatalf("got %d, %v; want 5, nil", v, err)
			}
			if got := srv.opened; got != 2 {
				t.Errorf("got %d connections opened, want 2", got)
			}
			if got := db.Stats().OpenConnections; got != 1 {
				t.Errorf("got %d open connections in the pool, want 1", got)
			}
		})
	}
}

func TestConnectorPreparedStatementReprepared(t *testing.T) {
	srv := newFakeServer()
	db, _ := openWrapped(t, srv, Config{})
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	st, err := db.PrepareContext(ctx, "ADD n ?")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.ExecContext(ctx, int64(1)); err != nil {
		t.Fatal(err)
	}
	srv.addFaults(&fault{op: "exec", err: driver.ErrBadConn, kill: true})
	if _, err := st.ExecContext(ctx, int64(2)); err != nil {
		t.Fatalf("got %v, want success after a reconnect", err)
	}
	if got := srv.get("n"); got != 3 {
		t.Errorf("got n = %d, want 3", got)
	}
	if got := srv.count("prepare"); got != 2 {
		t.Errorf("got %d prepares, want 2 (again on the new connection)", got)
	}
	if got := srv.opened; got != 2 {
		t.Errorf("got %d connections, want 2", got)
	}
}

func TestConnectorStreamingErrorNotRetried(t *testing.T) {
	srv := newFakeServer()
	db, _ := openWrapped(t, srv, Config{})
	srv.addFaults(&fault{op: "next", err: errLost})
	rows, err := db.QueryContext(context.Background(), "SELECT n")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
	}
	if err := rows.Err(); !errors.Is(err, errLost) {
		t.Errorf("got rows.Err() = %v, want the streaming error", err)
	}
	rows.Close()
	if got := srv.count("query"); got != 1 {
		t.Errorf("got %d queries, want 1", got)
	}
}

func TestConnectorNoStatementRetryInTx(t *testing.T) {
	srv := newFakeServer()
	db, _ := openWrapped(t, srv, Config{})
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.addFaults(&fault{op: "exec", err: errDeadlock}, &fault{op: "query", err: errLost})
	if _, err := tx.ExecContext(ctx, "ADD n 1"); err != errDeadlock {
		t.Errorf("got %v, want the deadlock unchanged", err)
	}
	var v int64
	if err := tx.QueryRowContext(ctx, "SELECT n").Scan(&v); err != errLost {
		t.Errorf("got %v, want the lost connection unchanged", err)
	}
	tx.Rollback()
	if got := srv.count("exec ") + srv.count("query "); got != 2 {
		t.Errorf("got %d statements, want 2 (none replayed)", got)
	}
	// After the transaction, statements are retried again.
	srv.addFaults(&fault{op: "exec", err: errDeadlock})
	if _, err := db.ExecContext(ctx, "ADD n 1"); err != nil {
		t.Errorf("got %v after the transaction, want a retried success", err)
	}
}

func TestConnectorBeginUnknownDropsSession(t *testing.T) {
	srv := newFakeServer()
	db, _ := openWrapped(t, srv, Config{})
	ctx := context.Background()
	if err := db.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	srv.addFaults(&fault{op: "begin", err: errLost})
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatalf("got %v, want BEGIN retried", err)
	}
	tx.Rollback()
	if got := srv.opened; got != 2 {
		t.Errorf("got %d connections, want 2 (a BEGIN that may have run leaves the session)", got)
	}
	if !srv.conn(0).closed {
		t.Error("the first connection is still open, want it closed")
	}
}

func TestConnectorSessionInit(t *testing.T) {
	srv := newFakeServer()
	var inits int
	db, _ := openWrapped(t, srv, Config{SessionInit: func(ctx context.Context, c driver.Conn) error {
		inits++
		_, err := c.(driver.ExecerContext).ExecContext(ctx, "SET session 1", nil)
		return err
	}})
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "ADD n 1"); err != nil {
		t.Fatal(err)
	}
	srv.addFaults(&fault{op: "exec", match: "ADD", err: driver.ErrBadConn, kill: true})
	if _, err := db.ExecContext(ctx, "ADD n 1"); err != nil {
		t.Fatal(err)
	}
	if inits != 2 {
		t.Errorf("got %d SessionInit calls, want 2 (connect and reconnect)", inits)
	}
	// A failing SessionInit fails the connect attempt, classified as usual.
	srv2 := newFakeServer(&fault{op: "exec", match: "SET session", err: errSyntax})
	db2, _ := openWrapped(t, srv2, Config{SessionInit: func(ctx context.Context, c driver.Conn) error {
		_, err := c.(driver.ExecerContext).ExecContext(ctx, "SET session 1", nil)
		return err
	}})
	if err := db2.PingContext(ctx); !errors.Is(err, errSyntax) {
		t.Errorf("got %v, want the SessionInit error", err)
	}
	if srv2.live != 0 {
		t.Errorf("got %d live connections, want 0 (closed after SessionInit failed)", srv2.live)
	}
}

func TestConnectorQueryUnderCommandTimeout(t *testing.T) {
	srv := newFakeServer(&fault{op: "query", block: true})
	db, _ := openWrapped(t, srv, Config{CommandTimeout: 30 * time.Millisecond})
	ctx := context.Background()
	// The first attempt blocks until the command timeout, the retry answers;
	// its rows are read after QueryContext returned, under a live context.
	var v int64
	if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&v); err != nil || v != 1 {
		t.Fatalf("got %d, %v; want 1, nil", v, err)
	}
	if got := srv.count("query"); got != 2 {
		t.Errorf("got %d queries, want 2", got)
	}
	// Exec under the timeout.
	if _, err := db.ExecContext(ctx, "ADD n 1"); err != nil {
		t.Fatal(err)
	}
}

func TestConnectorLibPQBadConnIsAmbiguous(t *testing.T) {
	if !isLibPQ(&pq.Driver{}) || !isLibPQ(pq.Driver{}) {
		t.Fatal("isLibPQ(pq.Driver) = false, want true")
	}
	if isLibPQ(fakeDriver{}) {
		t.Fatal("isLibPQ(fakeDriver) = true, want false")
	}
	srv := newFakeServer()
	p := testPolicy(t, Config{MaxRetries: 2})
	cn := Connector(&fakeConnector{s: srv}, p).(*connector)
	cn.pq = true // as if inner were lib/pq
	db := sql.OpenDB(cn)
	defer db.Close()
	ctx := context.Background()
	srv.addFaults(&fault{op: "exec", err: driver.ErrBadConn, apply: true, kill: true})
	if _, err := db.ExecContext(ctx, "ADD n 1"); !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("got %v, want ErrAmbiguous (lib/pq's ErrBadConn may follow a send)", err)
	}
	if got := srv.get("n"); got != 1 {
		t.Errorf("got n = %d, want 1 (not replayed)", got)
	}
	srv.addFaults(&fault{op: "query", err: driver.ErrBadConn, kill: true})
	var v int64
	if err := db.QueryRowContext(ctx, "SELECT n").Scan(&v); err != nil || v != 1 {
		t.Fatalf("got %d, %v; want the read retried: 1, nil", v, err)
	}
	// RunTx over lib/pq: ErrBadConn from COMMIT is ambiguous too.
	srv.addFaults(&fault{op: "commit", err: driver.ErrBadConn, apply: true, kill: true})
	err := RunTx(ctx, db, p, Write("t", nil), nil, addOne)
	if !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("got %v, want ErrAmbiguous", err)
	}
	if got := srv.get("n"); got != 2 {
		t.Errorf("got n = %d, want 2", got)
	}
}

func TestConnectorNamedValueChecker(t *testing.T) {
	for _, tc := range []struct {
		name string
		mk   func(*fakeConn) driver.Conn
		ok   bool
	}{
		{"inner checker", nil, true},
		{"no checker", func(c *fakeConn) driver.Conn { return minConn{c} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, wrapped := range []bool{false, true} {
				srv := newFakeServer()
				var cn driver.Connector = &fakeConnector{s: srv, mk: tc.mk}
				if wrapped {
					cn = Connector(cn, testPolicy(t, Config{}))
				}
				db := sql.OpenDB(cn)
				_, err := db.Exec("SET n ?", fakeCustom{})
				if (err == nil) != tc.ok {
					t.Errorf("wrapped=%v: got %v, want success %v", wrapped, err, tc.ok)
				}
				if tc.ok && srv.get("n") != 42 {
					t.Errorf("wrapped=%v: got n = %d, want 42 (converted by the inner checker)", wrapped, srv.get("n"))
				}
				db.Close()
			}
		})
	}
}

// Inner connection types with fewer optional interfaces.
type (
	minConn       struct{ c *fakeConn } // driver.Conn only
	pingConn      struct{ minConn }
	resetConn     struct{ minConn }
	pingResetConn struct{ minConn }
	minStmt       struct{ s *fakeStmt } // driver.Stmt only
	ccStmt        struct{ minStmt }     // + ColumnConverter
	ccConn        struct{ minConn }     // prepares ccStmts
)

func (m minConn) Prepare(q string) (driver.Stmt, error) {
	s, err := m.c.Prepare(q)
	if err != nil {
		return nil, err
	}
	return minStmt{s.(*fakeStmt)}, nil
}
func (m minConn) Close() error                             { return m.c.Close() }
func (m minConn) Begin() (driver.Tx, error)                { return m.c.Begin() }
func (m pingConn) Ping(ctx context.Context) error          { return m.c.Ping(ctx) }
func (m resetConn) ResetSession(ctx context.Context) error { return m.c.ResetSession(ctx) }
func (m pingResetConn) Ping(ctx context.Context) error     { return m.c.Ping(ctx) }
func (m pingResetConn) ResetSession(ctx context.Context) error {
	return m.c.ResetSession(ctx)
}
func (m ccConn) Prepare(q string) (driver.Stmt, error) {
	s, err := m.minConn.Prepare(q)
	if err != nil {
		return nil, err
	}
	return ccStmt{s.(minStmt)}, nil
}
func (s minStmt) Close() error                                 { return s.s.Close() }
func (s minStmt) NumInput() int                                { return s.s.NumInput() }
func (s minStmt) Exec(a []driver.Value) (driver.Result, error) { return s.s.Exec(a) }
func (s minStmt) Query(a []driver.Value) (driver.Rows, error)  { return s.s.Query(a) }
func (s ccStmt) ColumnConverter(int) driver.ValueConverter     { return driver.DefaultParameterConverter }
func (c *closingFakeConnector) Close() error                   { c.closed = true; return nil }

type closingFakeConnector struct {
	fakeConnector
	closed bool
}

// Interfaces a wrapper forwards only when the inner value has them.
var forwarded = map[string]reflect.Type{
	"Pinger":          reflect.TypeFor[driver.Pinger](),
	"SessionResetter": reflect.TypeFor[driver.SessionResetter](),
}

// Interfaces the connection wrapper always has, with the fallback database/sql
// documents or uses itself.
var always = map[string]reflect.Type{
	"ExecerContext":      reflect.TypeFor[driver.ExecerContext](),
	"QueryerContext":     reflect.TypeFor[driver.QueryerContext](),
	"ConnPrepareContext": reflect.TypeFor[driver.ConnPrepareContext](),
	"ConnBeginTx":        reflect.TypeFor[driver.ConnBeginTx](),
	"Validator":          reflect.TypeFor[driver.Validator](),
}

// Interfaces the wrapper must never add (the pre-context ones).
var never = map[string]reflect.Type{
	"Execer":  reflect.TypeFor[driver.Execer](),  //nolint:staticcheck
	"Queryer": reflect.TypeFor[driver.Queryer](), //nolint:staticcheck
}

func TestConnectorForwardingMatrix(t *testing.T) {
	kinds := []struct {
		name string
		mk   func(*fakeConn) driver.Conn
	}{
		{"full", nil},
		{"min", func(c *fakeConn) driver.Conn { return minConn{c} }},
		{"ping", func(c *fakeConn) driver.Conn { return pingConn{minConn{c}} }},
		{"reset", func(c *fakeConn) driver.Conn { return resetConn{minConn{c}} }},
		{"ping+reset", func(c *fakeConn) driver.Conn { return pingResetConn{minConn{c}} }},
		{"cc", func(c *fakeConn) driver.Conn { return ccConn{minConn{c}} }},
	}
	ctx := context.Background()
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			srv := newFakeServer()
			fc := &fakeConnector{s: srv, mk: k.mk}
			inner, err := fc.Connect(ctx)
			if err != nil {
				t.Fatal(err)
			}
			w, err := Connector(fc, testPolicy(t, Config{})).Connect(ctx)
			if err != nil {
				t.Fatal(err)
			}
			it, wt := reflect.TypeOf(inner), reflect.TypeOf(w)
			for name, iface := range forwarded {
				if got, want := wt.Implements(iface), it.Implements(iface); got != want {
					t.Errorf("conn %s: wrapper implements it: %v, want %v (as the inner)", name, got, want)
				}
			}
			for name, iface := range always {
				if !wt.Implements(iface) {
					t.Errorf("conn %s: wrapper lacks it, want it always", name)
				}
			}
			for name, iface := range never {
				if wt.Implements(iface) {
					t.Errorf("conn %s: wrapper has it, want never", name)
				}
			}
			// NamedValueChecker: forwarded when the inner has it; else the
			// wrapper lacks it or answers driver.ErrSkip ("as if
			// unimplemented").
			nvc := reflect.TypeFor[driver.NamedValueChecker]()
			if it.Implements(nvc) && !wt.Implements(nvc) {
				t.Errorf("conn NamedValueChecker: wrapper lacks it, the inner has it")
			}
			if !it.Implements(nvc) && wt.Implements(nvc) {
				if err := w.(driver.NamedValueChecker).CheckNamedValue(&driver.NamedValue{Ordinal: 1, Value: int64(1)}); err != driver.ErrSkip {
					t.Errorf("conn NamedValueChecker over an inner without one: %v, want driver.ErrSkip", err)
				}
			}
			ist, err := inner.Prepare("ADD n ?")
			if err != nil {
				t.Fatal(err)
			}
			wst, err := w.Prepare("ADD n ?")
			if err != nil {
				t.Fatal(err)
			}
			cc := reflect.TypeFor[driver.ColumnConverter]() //nolint:staticcheck
			if got, want := reflect.TypeOf(wst).Implements(cc), reflect.TypeOf(ist).Implements(cc); got != want {
				t.Errorf("stmt ColumnConverter: wrapper %v, inner %v", got, want)
			}
			for _, iface := range []reflect.Type{reflect.TypeFor[driver.StmtExecContext](), reflect.TypeFor[driver.StmtQueryContext](), reflect.TypeFor[driver.NamedValueChecker]()} {
				if !reflect.TypeOf(wst).Implements(iface) {
					t.Errorf("stmt %v: wrapper lacks it, want it always", iface)
				}
			}

			// End to end: database/sql over the wrapper behaves as over the inner.
			db := sql.OpenDB(Connector(&fakeConnector{s: srv, mk: k.mk}, testPolicy(t, Config{})))
			defer db.Close()
			if _, err := db.ExecContext(ctx, "ADD n ?", int64(2)); err != nil {
				t.Fatalf("exec: %v", err)
			}
			var v int64
			if err := db.QueryRowContext(ctx, "SELECT n").Scan(&v); err != nil || v != 2 {
				t.Fatalf("query: got %d, %v; want 2, nil", v, err)
			}
			rows, err := db.QueryContext(ctx, "SELECT n")
			if err != nil {
				t.Fatal(err)
			}
			cts, err := rows.ColumnTypes()
			if err != nil {
				t.Fatal(err)
			}
			if got := cts[0].DatabaseTypeName(); got != "BIGINT" {
				t.Errorf("rows: got DatabaseTypeName %q, want BIGINT (rows are not wrapped)", got)
			}
			rows.Close()
			if err := RunTx(ctx, db, testPolicy(t, Config{}), Write("t", nil), nil, addOne); err != nil {
				t.Fatalf("RunTx: %v", err)
			}
			if _, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true}); k.name != "full" && err == nil {
				t.Error("read-only BeginTx over a driver without ConnBeginTx: got nil error, want database/sql's")
			}
			if err := db.PingContext(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestConnectorCloserForwarded(t *testing.T) {
	p := testPolicy(t, Config{})
	if _, ok := Connector(&fakeConnector{s: newFakeServer()}, p).(interface{ Close() error }); ok {
		t.Error("wrapper of a connector without Close has Close")
	}
	srv := newFakeServer(&fault{op: "connect", err: errRefused})
	c, err := Connector(&fakeConnector{s: srv}, p).Driver().Open("any")
	if err != nil {
		t.Fatalf("Driver().Open: got %v, want the refused connect retried", err)
	}
	if _, ok := c.(driver.Validator); !ok {
		t.Errorf("Driver().Open returned %T, want the wrapper", c)
	}
	c.Close()
	cc := &closingFakeConnector{fakeConnector: fakeConnector{s: newFakeServer()}}
	db := sql.OpenDB(Connector(cc, p))
	db.Close()
	if !cc.closed {
		t.Error("db.Close did not close the inner connector")
	}
}

// Registered fake drivers for Open: "sqlretry-fake" without DriverContext,
// "sqlretry-fakectx" with it. The DSN names a server in fakeServers.
var (
	fakeServersMu sync.Mutex
	fakeServers   = map[string]*fakeServer{}
)

func fakeServerNamed(name string) *fakeServer {
	fakeServersMu.Lock()
	defer fakeServersMu.Unlock()
	return fakeServers[name]
}

type namedFakeDriver struct{}

func (namedFakeDriver) Open(dsn string) (driver.Conn, error) {
	s := fakeServerNamed(dsn)
	if s == nil {
		return nil, errors.New("fake: no server " + dsn)
	}
	return (&fakeConnector{s: s}).Connect(context.Background())
}

type namedFakeDriverCtx struct{ namedFakeDriver }

func (namedFakeDriverCtx) OpenConnector(dsn string) (driver.Connector, error) {
	s := fakeServerNamed(dsn)
	if s == nil {
		return nil, errors.New("fake: no server " + dsn)
	}
	return &fakeConnector{s: s}, nil
}

func init() {
	sql.Register("sqlretry-fake", namedFakeDriver{})
	sql.Register("sqlretry-fakectx", namedFakeDriverCtx{})
}

func TestOpen(t *testing.T) {
	for _, name := range []string{"sqlretry-fake", "sqlretry-fakectx"} {
		t.Run(name, func(t *testing.T) {
			srv := newFakeServer(&fault{op: "connect", err: errRefused}, &fault{op: "exec", err: errDeadlock})
			fakeServersMu.Lock()
			fakeServers[t.Name()] = srv
			fakeServersMu.Unlock()
			db, err := Open(name, t.Name(), testPolicy(t, Config{}))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.ExecContext(context.Background(), "ADD n 1"); err != nil {
				t.Fatalf("got %v, want the refused connect and the deadlock retried", err)
			}
			if got := srv.get("n"); got != 1 {
				t.Errorf("got n = %d, want 1", got)
			}
			if got := srv.count("connect"); got != 2 {
				t.Errorf("got %d connects, want 2", got)
			}
		})
	}
	if _, err := Open("sqlretry-no-such-driver", "", testPolicy(t, Config{})); err == nil {
		t.Error("Open of an unregistered driver: got nil error")
	}
	if _, err := Open("sqlretry-fakectx", "no-such-server", testPolicy(t, Config{})); err == nil {
		t.Error("Open with a DSN the DriverContext rejects: got nil error")
	}
}

// TestRunTxOverConnectorDoesNotMultiply: under RunTx the Connector makes one
// connect and one BEGIN per attempt; RunTx alone retries.
func TestRunTxOverConnectorDoesNotMultiply(t *testing.T) {
	tests := []struct {
		name        string
		faults      []*fault
		wantErr     error
		wantBegins  int
		wantConnect int
	}{
		{name: "BEGIN on a lost connection", faults: []*fault{{op: "begin", err: driver.ErrBadConn, kill: true}},
			wantBegins: 2, wantConnect: 2},
		{name: "BEGIN keeps failing", faults: []*fault{{op: "begin", err: errDeadlock, times: 10}},
			wantErr: ErrRetriesExhausted, wantBegins: 3, wantConnect: 1},
		{name: "connect keeps failing", faults: []*fault{{op: "connect", err: errRefused, times: 10}},
			wantErr: ErrRetriesExhausted, wantBegins: 0, wantConnect: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newFakeServer()
			db, p := openWrapped(t, srv, Config{})
			if tt.faults[0].op != "connect" {
				if err := db.Ping(); err != nil {
					t.Fatal(err)
				}
			}
			srv.addFaults(tt.faults...)
			err := RunTx(context.Background(), db, p, Write("t", nil), nil, addOne)
			if tt.wantErr == nil && err != nil || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("got %v, want %v", err, tt.wantErr)
			}
			if got := srv.count("begin"); got != tt.wantBegins {
				t.Errorf("got %d BEGINs, want %d", got, tt.wantBegins)
			}
			if got := srv.count("connect"); got != tt.wantConnect {
				t.Errorf("got %d connects, want %d", got, tt.wantConnect)
			}
		})
	}
}

type boundSchedule struct{ d time.Duration }

func (boundSchedule) Decide(Failure) (Decision, time.Duration) { return Defer, 0 }
func (b boundSchedule) ConnectTimeout() time.Duration          { return b.d }

// A connect schedule's ConnectTimeout (JDBC loginTimeout) bounds a login
// that hangs, not only the waits between attempts.
func TestConnectBoundCutsAHungLogin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hung := driverConnectorFunc(func(ctx context.Context) (driver.Conn, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		})
		p := testPolicy(t, Config{ConnectSchedule: boundSchedule{5 * time.Second}})
		start := time.Now()
		_, err := Connector(hung, p).Connect(context.Background())
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want the connect cut by its 5 s bound", err)
		}
		if waited := time.Since(start); waited != 5*time.Second {
			t.Fatalf("the connect ran %v of fake time, want 5s", waited)
		}
	})
}

type driverConnectorFunc func(ctx context.Context) (driver.Conn, error)

func (f driverConnectorFunc) Connect(ctx context.Context) (driver.Conn, error) { return f(ctx) }
func (f driverConnectorFunc) Driver() driver.Driver                            { return nil }

// A transaction begun through the Connector with a CommandTimeout commits:
// the inner BeginTx gets the caller's context, which drivers keep for
// COMMIT, not the attempt's, which ends when BEGIN returns.
func TestConnectorBeginTxUnderCommandTimeoutCommits(t *testing.T) {
	srv := newFakeServer()
	p := testPolicy(t, Config{CommandTimeout: time.Minute})
	db := sql.OpenDB(Connector(&fakeConnector{s: srv}, p))
	defer db.Close()
	tx, err := db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("ADD n 1"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if got := srv.get("n"); got != 1 {
		t.Fatalf("n = %d, want 1", got)
	}
}

// driver.ErrSkip on a retry reaches database/sql bare, so it falls back to
// prepare (go-sql-driver/mysql returns it for statements with arguments).
func TestConnectorErrSkipAfterARetryIsBare(t *testing.T) {
	srv := newFakeServer(&fault{op: "exec", err: errDeadlock}, &fault{op: "exec", err: driver.ErrSkip})
	p := testPolicy(t, Config{})
	db := sql.OpenDB(Connector(&fakeConnector{s: srv}, p))
	defer db.Close()
	if _, err := db.Exec("ADD n 1"); err != nil {
		t.Fatalf("got %v, want database/sql to fall back to prepare and succeed", err)
	}
	if got := srv.get("n"); got != 1 {
		t.Fatalf("n = %d, want 1", got)
	}
	if srv.count("prepare") == 0 {
		t.Fatal("database/sql never prepared the statement: it did not see driver.ErrSkip")
	}
}
