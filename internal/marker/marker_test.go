package marker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	sr "github.com/sqlretry/sqlretry"
)

var testDialect = Dialect{
	Engine: "test",
	Param:  func(int) string { return "?" },
	DDL:    func(t Name, index string) []string { return []string{"CREATE " + t.String() + " " + index} },
	Prune:  func(t, cutoff, limit string) string { return "PRUNE " + t + " " + cutoff + " " + limit },
	Classify: func(err error) sr.Class {
		return sr.Class{}
	},
}

func TestParseName(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Name
		ok   bool
	}{
		{"sqlretry_commit_marks", Name{Table: "sqlretry_commit_marks"}, true},
		{"ops.Marks_2", Name{Schema: "ops", Table: "Marks_2"}, true},
		{"_x", Name{Table: "_x"}, true},
		{"", Name{}, false},
		{"2marks", Name{}, false},
		{"marks;drop", Name{}, false},
		{"a.b.c", Name{}, false},
		{".marks", Name{}, false},
		{"ops.", Name{}, false},
		{`"marks"`, Name{}, false},
		{"m\u00e4rks", Name{}, false},
		{strings.Repeat("a", maxIdent), Name{Table: strings.Repeat("a", maxIdent)}, true},
		{strings.Repeat("a", maxIdent+1), Name{}, false},
	} {
		got, err := ParseName(tc.in)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("ParseName(%q) = %+v, %v; want %+v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestNewDefaultsAndStatements(t *testing.T) {
	v, err := New(&testDialect, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if v.maxWait != DefaultMaxWait || v.ttl != DefaultTTL || v.every != DefaultPruneEvery {
		t.Errorf("defaults: got %v, %v, %d", v.maxWait, v.ttl, v.every)
	}
	want := statements{
		insert: "INSERT INTO sqlretry_commit_marks (mark_key, created_at, tombstone) VALUES (?, ?, ?)",
		lookup: "SELECT tombstone FROM sqlretry_commit_marks WHERE mark_key = ?",
		prune:  "PRUNE sqlretry_commit_marks ? ?",
		ddl:    []string{"CREATE sqlretry_commit_marks sqlretry_commit_marks_created_at"},
	}
	if v.stmt().insert != want.insert || v.stmt().lookup != want.lookup || v.stmt().prune != want.prune || strings.Join(v.stmt().ddl, ";") != strings.Join(want.ddl, ";") {
		t.Errorf("statements: got %+v, want %+v", *v.stmt(), want)
	}
	if v, _ := New(&testDialect, Config{PruneEvery: -1}); v.every != 0 {
		t.Errorf("PruneEvery -1: got every %d, want 0 (never)", v.every)
	}
}

func TestNewFieldErrors(t *testing.T) {
	for _, tc := range []struct {
		c     Config
		field string
	}{
		{Config{Table: "x y"}, "test: MarkerVerifier.Table: "},
		{Config{MaxWait: -time.Second}, "test: MarkerVerifier.MaxWait: "},
		{Config{TTL: 59 * time.Second}, "test: MarkerVerifier.TTL: "},
		{Config{TTL: -time.Hour}, "test: MarkerVerifier.TTL: "},
		{Config{TTL: 2 * time.Minute, MaxWait: 30 * time.Second}, "test: MarkerVerifier.TTL: "}, // under 10×MaxWait
	} {
		if _, err := New(&testDialect, tc.c); err == nil || !strings.HasPrefix(err.Error(), tc.field) {
			t.Errorf("%+v: got %v, want an error starting %q", tc.c, err, tc.field)
		}
	}
}

func TestCommittedRejectsMalformedKeys(t *testing.T) {
	v, err := New(&testDialect, Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"", "abc", strings.Repeat("A", 32), strings.Repeat("g", 32), sr.NewKey() + "0"} {
		if _, err := v.Committed(context.Background(), nil, key); err == nil {
			t.Errorf("Committed(%q): got nil error", key)
		}
	}
}

// TestInFlightError: it matches ErrInFlight, keeps the database's error,
// and states a verdict that is not retryable.
func TestInFlightError(t *testing.T) {
	last := errors.New("lock wait")
	err := error(&inFlightError{"test: MarkerVerifier", time.Second, last})
	var v interface{ Verdict() sr.Class }
	if !errors.Is(err, ErrInFlight) || !errors.Is(err, last) || !errors.As(err, &v) || v.Verdict().Retryable {
		t.Errorf("got %v: want it to match ErrInFlight and the last error, with a verdict that is not retryable", err)
	}
}

// TestInlineMark: the INSERT with its values written in, and a seam's key
// that is not one refused rather than written into SQL.
func TestInlineMark(t *testing.T) {
	key := "0123456789abcdef0123456789abcdef"
	v, err := New(&testDialect, Config{Table: "ops.marks", Now: func() time.Time { return time.Unix(1700000000, 0) },
		NewKey: func() string { return key }})
	if err != nil {
		t.Fatal(err)
	}
	gotKey, stmt, err := v.InlineMark("; COMMIT")
	want := "INSERT INTO ops.marks (mark_key, created_at, tombstone) SELECT '" + key + "', 1700000000, 0; COMMIT"
	if err != nil || gotKey != key || stmt != want {
		t.Fatalf("InlineMark() = %q, %q, %v; want %q, %q", gotKey, stmt, err, key, want)
	}
	key = "x'); DROP TABLE t; --"
	if _, stmt, err := v.InlineMark(""); err == nil || stmt != "" {
		t.Fatalf("a bad key: %q, %v; want an error", stmt, err)
	}
}
