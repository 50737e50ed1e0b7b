package pgxretry_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sqlretry/sqlretry"
)

// BenchmarkMarkerShapes measures, without RunTx, what each way of marking a
// point-UPDATE transaction (BEGIN; UPDATE; COMMIT) could cost the server
// (its backend's CPU, /proc schedstat) and the wall clock, on one
// connection, in rotating blocks of 16 — the evidence for WithMarker's
// shape (issue 20):
//
//   - none: not marked;
//   - simple2idx: "INSERT ... SELECT 'key', ...; COMMIT" as one simple query
//     (WithMarker on a pool in another exec mode);
//   - ext2idx: the INSERT and COMMIT prepared, in one pipeline (WithMarker's
//     default); ext1idx without the created_at index; extuuid a uuid key;
//     ext2idxRandom random keys (sqlretry.NewKey) rather than rising ones;
//   - xidAtBegin: "BEGIN; SELECT pg_current_xact_id()" in one message.
//
// go test -run '^$' -bench MarkerShapes -benchtime 150x -count 3 ./pgxretry
func BenchmarkMarkerShapes(b *testing.B) {
	pool, _ := benchFixture(b)
	ctx := context.Background()
	for _, q := range []string{
		"CREATE TABLE IF NOT EXISTS m2 (mark_key char(32) PRIMARY KEY, created_at bigint NOT NULL, tombstone smallint NOT NULL)",
		"CREATE INDEX IF NOT EXISTS m2_c ON m2 (created_at)",
		"CREATE TABLE IF NOT EXISTS m1 (mark_key char(32) PRIMARY KEY, created_at bigint NOT NULL, tombstone smallint NOT NULL)",
		"CREATE TABLE IF NOT EXISTS mu (mark_key uuid PRIMARY KEY, created_at bigint NOT NULL, tombstone smallint NOT NULL)",
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	c, err := pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Release()
	pc := c.Conn().PgConn()
	var backend uint32 = pc.PID()
	if _, err := pc.Prepare(ctx, "ins2", "INSERT INTO m2 (mark_key, created_at, tombstone) VALUES ($1, $2, 0)", nil); err != nil {
		b.Fatal(err)
	}
	if _, err := pc.Prepare(ctx, "ins1", "INSERT INTO m1 (mark_key, created_at, tombstone) VALUES ($1, $2, 0)", nil); err != nil {
		b.Fatal(err)
	}
	if _, err := pc.Prepare(ctx, "insu", "INSERT INTO mu (mark_key, created_at, tombstone) VALUES ($1::text::uuid, $2, 0)", nil); err != nil {
		b.Fatal(err)
	}
	if _, err := pc.Prepare(ctx, "commit", "COMMIT", nil); err != nil {
		b.Fatal(err)
	}
	n := 0
	key := func() string { n++; return fmt.Sprintf("%032x", uint64(time.Now().UnixNano())+uint64(n)) }
	upd := func() error {
		_, err := c.Exec(ctx, "UPDATE items SET note = 'w' WHERE seq = $1", n%1000+1)
		return err
	}
	simple := func(q string) error { _, err := pc.Exec(ctx, q).ReadAll(); return err }
	ext := func(stmt string, k string) error {
		bt := &pgconn.Batch{}
		bt.ExecPrepared(stmt, [][]byte{[]byte(k), []byte("1700000000")}, nil, nil)
		bt.ExecPrepared("commit", nil, nil, nil)
		_, err := pc.ExecBatch(ctx, bt).ReadAll()
		return err
	}
	// tx runs BEGIN (begin's text), the point UPDATE, and end.
	tx := func(begin string, end func() error) func() error {
		return func() error {
			if err := simple(begin); err != nil {
				return err
			}
			if err := upd(); err != nil {
				return err
			}
			return end()
		}
	}
	shapes := []struct {
		name string
		run  func() error
	}{
		{"none", tx("BEGIN", func() error { return simple("COMMIT") })},
		{"simple2idx", tx("BEGIN", func() error {
			return simple("INSERT INTO m2 (mark_key, created_at, tombstone) SELECT '" + key() + "', 1700000000, 0; COMMIT")
		})},
		{"ext2idx", tx("BEGIN", func() error { return ext("ins2", key()) })},
		{"ext1idx", tx("BEGIN", func() error { return ext("ins1", key()) })},
		{"extuuid", tx("BEGIN", func() error { return ext("insu", key()) })},
		{"ext2idxRandom", tx("BEGIN", func() error { return ext("ins2", sqlretry.NewKey()) })},
		{"xidAtBegin", tx("BEGIN; SELECT pg_current_xact_id()", func() error { return simple("COMMIT") })},
	}
	const block = 16
	server := make([]time.Duration, len(shapes))
	wall := make([]time.Duration, len(shapes))
	round := 0
	for b.Loop() {
		for k := range shapes {
			j := (k + round) % len(shapes)
			s0, w0 := schedTime(b, backend), time.Now()
			for range block {
				if err := shapes[j].run(); err != nil {
					b.Fatal(shapes[j].name, err)
				}
			}
			server[j] += schedTime(b, backend) - s0
			wall[j] += time.Since(w0)
		}
		round++
	}
	calls := float64(b.N * block)
	for j, s := range shapes {
		b.ReportMetric(float64(server[j].Nanoseconds())/calls/1000, s.name+"-srv-µs")
		b.ReportMetric(float64(wall[j].Nanoseconds())/calls/1000, s.name+"-wall-µs")
	}
}
