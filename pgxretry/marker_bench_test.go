package pgxretry_test

import (
	"context"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/pgxretry"
	"github.com/sqlretry/sqlretry/postgres"
)

// The cost of settling a commit, per transaction, against the real server:
// go test -run '^$' -bench Settlement -benchtime 2s -count 6 ./pgxretry
//
// Every variant runs RunTx on the same one-connection pool:
//
//   - none: an Op with a Verify of its own (nothing marked; the baseline);
//   - xact: pg_xact_status, its mark taken by a query before COMMIT;
//   - marker: WithMarker, the marker INSERT sent with COMMIT (pruning every
//     100 transactions included), as a pipeline of the two statements
//     prepared (pgx's default exec mode);
//   - none-text and marker-text: none and marker on a one-connection pool in
//     another exec mode (QueryExecModeExec), where the marker goes as one
//     simple query ("INSERT ...; COMMIT", the values written in); the
//     body's own statements cost more there, so marker-text's overhead is
//     over none-text.
//
// Blocks of 16 transactions of each variant alternate, their order rotating
// each round; a variant's overhead is the median over rounds of its
// block's time over none's, minus one.

// settlementVariants returns the four variants running body, and their
// one-connection pools.
func settlementVariants(b testing.TB, body func(ctx context.Context, tx pgx.Tx) error) ([]string, []func() error, []*pgxpool.Pool) {
	pool, w := benchFixture(b)
	wm := pgxretry.New(pool, w.Policy(), pgxretry.WithMarker(&postgres.MarkerVerifier{CreateTable: true}))
	b.Cleanup(wm.Close)
	textPool := openPool(b, pool.Config().ConnString(), "pgxretry_bench_text", func(c *pgxpool.Config) {
		c.MaxConns = 1
		c.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	})
	wt := pgxretry.New(textPool, w.Policy(), pgxretry.WithMarker(&postgres.MarkerVerifier{CreateTable: true}))
	b.Cleanup(wt.Close)
	ctx := context.Background()
	verify := func(context.Context) (bool, error) { return false, nil }
	run := func(w *pgxretry.Pool, op sqlretry.Op) func() error {
		return func() error { return w.RunTx(ctx, op, pgx.TxOptions{}, body) }
	}
	return []string{"none", "xact", "marker", "none-text", "marker-text"}, []func() error{
		run(w, sqlretry.Write("bench", verify)),
		run(w, sqlretry.Write("bench", nil)),
		run(wm, sqlretry.Write("bench", nil)),
		run(wt, sqlretry.Write("bench", verify)),
		run(wt, sqlretry.Write("bench", nil)),
	}, []*pgxpool.Pool{pool, textPool}
}

// pointWrite and pointRead are the transactions measured: one UPDATE, or
// one SELECT, by primary key.
func pointWrite() func(ctx context.Context, tx pgx.Tx) error {
	i := 0
	return func(ctx context.Context, tx pgx.Tx) error {
		i = i%1000 + 1
		_, err := tx.Exec(ctx, "UPDATE items SET note = 'w' WHERE seq = $1", i)
		return err
	}
}

func pointRead() func(ctx context.Context, tx pgx.Tx) error {
	var note string
	return func(ctx context.Context, tx pgx.Tx) error {
		return tx.QueryRow(ctx, "SELECT note FROM items WHERE seq = $1", 7).Scan(&note)
	}
}

func BenchmarkSettlement(b *testing.B) {
	b.Run("write", func(b *testing.B) { interleaveN(b, pointWrite()) })
	b.Run("read", func(b *testing.B) { interleaveN(b, pointRead()) })
}

// interleaveN runs the variants in rotating blocks and reports each one's
// mean time per transaction and median overhead over none.
func interleaveN(b *testing.B, body func(ctx context.Context, tx pgx.Tx) error) {
	names, fns, _ := settlementVariants(b, body)
	const block = 16
	totals := make([]time.Duration, len(fns))
	ratios := make([][]float64, len(fns))
	round := 0
	for b.Loop() {
		took := make([]time.Duration, len(fns))
		for k := range fns {
			j := (k + round) % len(fns)
			start := time.Now()
			for range block {
				if err := fns[j](); err != nil {
					b.Fatal(err)
				}
			}
			took[j] = time.Since(start)
		}
		round++
		for j := range fns {
			totals[j] += took[j]
			ratios[j] = append(ratios[j], float64(took[j])/float64(took[baseline(names, j)]))
		}
	}
	calls := float64(b.N * block)
	for j, name := range names {
		b.ReportMetric(float64(totals[j].Microseconds())/calls, name+"-µs/tx")
		if baseline(names, j) != j {
			sort.Float64s(ratios[j])
			b.ReportMetric(100*(ratios[j][len(ratios[j])/2]-1), name+"-overhead-%")
		}
	}
}

// baseline returns the index of the variant names[j] is measured against:
// none-text for a -text one, else none.
func baseline(names []string, j int) int {
	want := "none"
	if strings.HasSuffix(names[j], "-text") {
		want = "none-text"
	}
	for i, n := range names {
		if n == want {
			return i
		}
	}
	return 0
}

// TestSettlementAllocs reports each variant's allocations per transaction
// (go test -run SettlementAllocs -v ./pgxretry).
func TestSettlementAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	names, fns, _ := settlementVariants(t, pointWrite())
	for j, name := range names {
		n := testing.AllocsPerRun(200, func() { must(t, fns[j]()) })
		t.Logf("%s: %.1f allocations per transaction", name, n)
	}
}

// BenchmarkSettlementCPU reports what each variant costs in CPU time, which
// a loaded machine inflates far less than wall time: the server backend's
// (its /proc schedstat, PostgreSQL on this machine) and this process's
// (getrusage), per transaction, each variant in rotating blocks of 16 on
// the one connection:
// go test -run '^$' -bench SettlementCPU -benchtime 200x -count 6 ./pgxretry
func BenchmarkSettlementCPU(b *testing.B) {
	b.Run("write", func(b *testing.B) { cpuPerTx(b, pointWrite()) })
	b.Run("read", func(b *testing.B) { cpuPerTx(b, pointRead()) })
}

func cpuPerTx(b *testing.B, body func(ctx context.Context, tx pgx.Tx) error) {
	names, fns, pools := settlementVariants(b, body)
	for _, fn := range fns { // connects, and settles the table
		if err := fn(); err != nil {
			b.Fatal(err)
		}
	}
	// Each pool's one backend: a variant's server CPU is theirs together
	// (the other one idles meanwhile).
	backends := make([]uint32, len(pools))
	for i, pool := range pools {
		if err := pool.QueryRow(context.Background(), "SELECT pg_backend_pid()").Scan(&backends[i]); err != nil {
			b.Fatal(err)
		}
	}
	serverCPU := func() (d time.Duration) {
		for _, pid := range backends {
			d += schedTime(b, pid)
		}
		return d
	}
	const block = 16
	server := make([]time.Duration, len(fns))
	client := make([]time.Duration, len(fns))
	round := 0
	for b.Loop() {
		for k := range fns {
			j := (k + round) % len(fns)
			s0, c0 := serverCPU(), rusage()
			for range block {
				if err := fns[j](); err != nil {
					b.Fatal(err)
				}
			}
			server[j] += serverCPU() - s0
			client[j] += rusage() - c0
		}
		round++
	}
	calls := float64(b.N * block)
	for j, name := range names {
		b.ReportMetric(float64(server[j].Nanoseconds())/calls/1000, name+"-server-cpu-µs/tx")
		b.ReportMetric(float64(client[j].Nanoseconds())/calls/1000, name+"-client-cpu-µs/tx")
	}
}

// schedTime returns the CPU time process pid has run so far.
func schedTime(b *testing.B, pid uint32) time.Duration {
	raw, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/schedstat")
	if err != nil {
		b.Skipf("the server's CPU time is not readable here: %v", err)
	}
	ns, err := strconv.ParseInt(strings.Fields(string(raw))[0], 10, 64)
	if err != nil {
		b.Fatal(err)
	}
	return time.Duration(ns)
}

// rusage returns this process's CPU time so far, user and system.
func rusage() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
