package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlretry/sqlretry/cmd/sqlretry/internal/engine"
)

// ServeWorker runs one worker process of a fleet ([Config.Processes]): it
// reads its spec from in, sets up, says it is ready, waits for the
// parent's go, runs the tasks workload against the parent's database with
// a policy, a retry budget, a fault plan and a wire proxy of its own, and
// writes its result to out. The end of in stops it early: the parent was
// interrupted or died, so a worker never outlives its parent by more than
// an operation. It returns the process's exit code: 0 when it wrote a
// result (an interrupted run's too), 1 when it could not.
func ServeWorker(ctx context.Context, in io.Reader, out io.Writer) int {
	enc := &workerEncoder{enc: json.NewEncoder(out)}
	rd := bufio.NewReader(in)
	var spec workerSpec
	line, err := rd.ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &spec)
	}
	if err != nil {
		_ = enc.send(workerMsg{Error: fmt.Sprintf("read the worker's spec from standard input: %v", err)})
		return 1
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := make(chan struct{})
	go func() {
		// "go" starts the workload; the end of the input (or anything
		// else) stops it.
		l, err := rd.ReadString('\n')
		if err == nil && strings.TrimSpace(l) == goLine {
			close(start)
			_, _ = io.Copy(io.Discard, rd)
		}
		cancel()
	}()
	res, err := runWorker(ctx, spec, start, enc)
	if err != nil {
		msg := workerMsg{Error: err.Error(), Interrupted: errors.Is(err, ErrInterrupted)}
		var ie *InputError
		if errors.As(err, &ie) {
			msg.InputWhat, msg.Error = ie.What, ie.Err.Error()
		}
		_ = enc.send(msg)
		return 1
	}
	if err := enc.send(workerMsg{Result: res}); err != nil {
		return 1
	}
	return 0
}

// workerEncoder writes a worker's messages, one at a time.
type workerEncoder struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (e *workerEncoder) send(m workerMsg) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.enc.Encode(m)
}

// runWorker is [run] for one process of a fleet: the shared database, not
// a fresh one; worker ids from spec.FirstWorker; the workload starts when
// start is closed; samples go to the parent; and the result is the
// process's half of the report, the invariants left to the parent.
func runWorker(ctx context.Context, spec workerSpec, start <-chan struct{}, enc *workerEncoder) (*workerResult, error) {
	cfg := spec.config()
	cfg.Progress = func(s Sample) { _ = enc.send(workerMsg{Sample: &s}) }
	h := newHarness(cfg, "ours")
	tgt, err := openShared(ctx, spec)
	if err != nil {
		return nil, err
	}
	defer tgt.close()
	if err := h.openDB(tgt); err != nil {
		return nil, err
	}
	defer h.db.Close()
	// The parent migrated; this Migrate finds the tables there and only
	// checks, through the proxy, that the connections are not encrypted.
	workers, err := h.setUp(ctx, spec.FirstWorker)
	if err != nil {
		return nil, err
	}
	if err := enc.send(workerMsg{Ready: true}); err != nil {
		return nil, err
	}
	select {
	case <-start:
	case <-ctx.Done():
		// A stop right after the go (the parent interrupted as the run
		// began) finds both ready, and select picks either: a worker given
		// the go runs, if only for an instant, and reports.
		select {
		case <-start:
		default:
			return nil, ErrInterrupted
		}
	}

	h.runWorkers(ctx, workers, tgt)
	res := h.workerResult()
	res.Index = spec.Index
	return res, nil
}

// workerResult is [harness.finish] without the checks: the process's
// report and the material for the parent's.
func (h *harness) workerResult() *workerResult {
	st := h.pol.Stats()
	r := h.runReport()
	res := &workerResult{PID: os.Getpid(), Report: r, Calls: st.Calls, Attempts: st.Attempts,
		Entries: h.ledger.Entries(), Starts: h.ledger.Starts(), Claimed: map[string]string{}}
	for i, s := range h.shapes {
		s.mu.Lock()
		res.Latencies[i] = append([]time.Duration(nil), s.latencies...)
		s.mu.Unlock()
	}
	h.mu.Lock()
	for tok, id := range h.claimed {
		res.Claimed[tok] = id
	}
	h.mu.Unlock()
	return res
}

// openShared opens the parent's database for one worker process: the
// SQLite file, or the schema (PostgreSQL) or database (MySQL) it created,
// through a wire proxy of the process's own unless spec.NoProxy, as each
// replica of a service has its own connections to the server.
func openShared(ctx context.Context, spec workerSpec) (*target, error) {
	t := &target{name: spec.Name}
	var err error
	switch spec.Engine {
	case engine.Postgres:
		err = t.sharedPostgres(spec)
	case engine.MySQL:
		err = t.sharedMySQL(spec)
	default:
		err = t.sharedSQLite(spec)
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

func (t *target) sharedSQLite(spec workerSpec) error {
	return t.sqliteConnector(sqliteDSN(spec.Name))
}

func (t *target) sharedPostgres(spec workerSpec) error {
	cfg, err := pgx.ParseConfig(spec.DSN)
	if err != nil {
		return inputErr("--dsn", err)
	}
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["search_path"] = spec.Name
	if !spec.NoProxy {
		if err := t.proxyPostgres(cfg); err != nil {
			return err
		}
	}
	t.inner = stdlib.GetConnector(*cfg)
	return nil
}

func (t *target) sharedMySQL(spec workerSpec) error {
	cfg, err := gomysql.ParseDSN(spec.DSN)
	if err != nil {
		return inputErr("--dsn", err)
	}
	cfg.DBName = spec.Name
	cfg.Logger = &gomysql.NopLogger{} // the report counts broken connections
	if !spec.NoProxy {
		if err := t.proxyMySQL(cfg); err != nil {
			return err
		}
	}
	t.inner, err = gomysql.NewConnector(cfg)
	return err
}
