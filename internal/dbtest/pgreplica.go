package dbtest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// pgStandbyName is the standby's application_name, which the primary's
// synchronous_standby_names names in synchronous mode.
const pgStandbyName = "standby1"

// pgReplicaTimeout bounds waiting for the standby to stream, to stop or
// resume receiving, and to be promoted.
const pgReplicaTimeout = 30 * time.Second

// ReplicaOptions adjusts a [PostgresReplica].
type ReplicaOptions struct {
	// Sync makes the standby synchronous: the primary's
	// synchronous_standby_names names it, so a COMMIT returns only once the
	// standby has flushed its WAL (synchronous_commit=on).
	Sync bool
	// Settings are passed to both servers, after the defaults.
	Settings map[string]string
}

// A PostgresReplica is a throwaway PostgreSQL primary and a hot standby
// streaming from it, each a [Server] of the test's, each killed and removed
// at cleanup. The standby is a pg_basebackup of the primary; it runs with no
// synchronous_standby_names of its own, so that once promoted its commits
// wait for nobody.
type PostgresReplica struct {
	Primary, Standby *Server
	sync             bool
	conninfo         string // the standby's primary_conninfo
}

// StartPostgresReplica starts a primary and a standby streaming from it, and
// waits until the standby streams (and, with Sync, is the synchronous one).
func StartPostgresReplica(t TB, opts ReplicaOptions) *PostgresReplica {
	t.Helper()
	settings := map[string]string{"wal_keep_size": "64MB", "hot_standby": "on"}
	for k, v := range opts.Settings {
		settings[k] = v
	}
	primarySettings := map[string]string{"synchronous_standby_names": ""}
	if opts.Sync {
		primarySettings["synchronous_standby_names"] = pgStandbyName
	}
	for k, v := range settings {
		primarySettings[k] = v
	}
	primary := StartPostgresWith(t, Options{Settings: primarySettings})
	if primary == nil {
		return nil // skipped
	}
	r := &PostgresReplica{Primary: primary, sync: opts.Sync}
	r.conninfo = fmt.Sprintf("host=127.0.0.1 port=%d user=postgres application_name=%s", primary.port, pgStandbyName)
	settings["synchronous_standby_names"] = ""
	r.Standby = startStandby(t, primary, r.conninfo, settings)
	ctx, cancel := context.WithTimeout(context.Background(), pgReplicaTimeout)
	defer cancel()
	if err := r.WaitStreaming(ctx); err != nil {
		t.Fatalf("dbtest: %v\nstandby log:\n%s", err, r.Standby.logSince(0))
	}
	return r
}

// startStandby takes a base backup of primary into a new private directory
// and starts it as a standby streaming from conninfo.
func startStandby(t TB, primary *Server, conninfo string, settings map[string]string) *Server {
	t.Helper()
	bin, err := postgresBinDir()
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	dir, err := os.MkdirTemp("", "sqlretry-pg-standby-")
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	if err := chownTo(dir, primary.cred); err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	data := filepath.Join(dir, "data")
	start := time.Now()
	if err := run(primary.cred, "", filepath.Join(bin, "pg_basebackup"), "-h", "127.0.0.1", "-p", strconv.Itoa(primary.port),
		"-U", "postgres", "-D", data, "-X", "stream", "-c", "fast", "--no-sync"); err != nil {
		os.RemoveAll(dir)
		t.Fatalf("dbtest: base backup of the primary: %v", err)
	}
	if err := standbyFiles(data, conninfo, primary.cred); err != nil {
		os.RemoveAll(dir)
		t.Fatalf("dbtest: %v", err)
	}
	s := &Server{
		kind:     "PostgreSQL",
		dir:      dir,
		logPath:  filepath.Join(dir, "server.log"),
		driver:   "pgx",
		cred:     primary.cred,
		stopSig:  syscall.SIGINT,
		argv:     postgresArgv(filepath.Join(bin, "postgres"), dir, mergeSettings(postgresDefaults, settings)),
		copyTime: time.Since(start),
		dsn: func(port int) string {
			return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
		},
	}
	return launch(t, s)
}

// standbyFiles makes data a standby's: standby.signal, and primary_conninfo
// in postgresql.auto.conf, where ALTER SYSTEM can change it later (a
// command-line setting could not be).
func standbyFiles(data, conninfo string, cred *syscall.Credential) error {
	signal := filepath.Join(data, "standby.signal")
	if err := os.WriteFile(signal, nil, 0o600); err != nil {
		return err
	}
	auto := filepath.Join(data, "postgresql.auto.conf")
	f, err := os.OpenFile(auto, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "primary_conninfo = '%s'\n", conninfo)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := chownTo(signal, cred); err != nil {
		return err
	}
	return chownTo(auto, cred)
}

// MultiHostDSN returns a DSN naming the primary and then the standby, with
// target_session_attrs=read-write: a client connects to whichever of the
// two accepts writes, which after a promotion is the standby.
func (r *PostgresReplica) MultiHostDSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
		r.Primary.port, r.Standby.port)
}

// WaitStreaming waits until the primary sees the standby streaming (and, in
// synchronous mode, as its synchronous standby).
func (r *PostgresReplica) WaitStreaming(ctx context.Context) error {
	q := "SELECT count(*) FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming'"
	if r.sync {
		q += " AND sync_state = 'sync'"
	}
	return pollCount(ctx, r.Primary.DSN(), 1, q, pgStandbyName)
}

// StopReceiving stops the standby's WAL receiver (primary_conninfo set
// empty and reloaded): it stays a standby and falls behind, and in
// synchronous mode the primary's commits wait for it. It returns once no
// receiver runs.
func (r *PostgresReplica) StopReceiving(ctx context.Context) error {
	if err := execOn(ctx, r.Standby.DSN(), "ALTER SYSTEM SET primary_conninfo = ''", "SELECT pg_reload_conf()"); err != nil {
		return err
	}
	return pollCount(ctx, r.Standby.DSN(), 0, "SELECT count(*) FROM pg_stat_wal_receiver")
}

// ResumeReceiving undoes StopReceiving and waits until the standby streams
// again.
func (r *PostgresReplica) ResumeReceiving(ctx context.Context) error {
	if err := execOn(ctx, r.Standby.DSN(), "ALTER SYSTEM SET primary_conninfo = '"+r.conninfo+"'", "SELECT pg_reload_conf()"); err != nil {
		return err
	}
	return r.WaitStreaming(ctx)
}

// PauseReplay pauses WAL replay on the standby: it keeps receiving (and, in
// synchronous mode, acknowledging) WAL, but its data falls behind. A
// promotion replays what was received first.
func (r *PostgresReplica) PauseReplay(ctx context.Context) error {
	return execOn(ctx, r.Standby.DSN(), "SELECT pg_wal_replay_pause()")
}

// ResumeReplay undoes PauseReplay.
func (r *PostgresReplica) ResumeReplay(ctx context.Context) error {
	return execOn(ctx, r.Standby.DSN(), "SELECT pg_wal_replay_resume()")
}

// Promote promotes the standby (pg_promote, waiting for it) and waits until
// it accepts writes. The primary should be stopped first: nothing fences it.
func (r *PostgresReplica) Promote(ctx context.Context) error {
	if err := execOn(ctx, r.Standby.DSN(), "SELECT pg_promote(true, 30)"); err != nil {
		return fmt.Errorf("dbtest: promote the standby: %w", err)
	}
	return pollCount(ctx, r.Standby.DSN(), 0, "SELECT count(*) FROM (SELECT pg_is_in_recovery() AS r) s WHERE r")
}

// execOn runs stmts in order on one connection to dsn.
func execOn(ctx context.Context, dsn string, stmts ...string) error {
	return adminExec(ctx, "pgx", dsn, stmts...)
}

// pollCount runs the counting query q on dsn until it returns want or ctx
// ends (bounded by pgReplicaTimeout).
func pollCount(ctx context.Context, dsn string, want int, q string, args ...any) error {
	ctx, cancel := context.WithTimeout(ctx, pgReplicaTimeout)
	defer cancel()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	var n int
	var last error
	for {
		last = db.QueryRowContext(ctx, q, args...).Scan(&n)
		if last == nil && n == want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("dbtest: %s: got %d (last error %v), want %d: %w", q, n, last, want, ctx.Err())
		case <-time.After(pollInterval):
		}
	}
}
