package sqlretry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
)

// stubVerifier marks with mark (or fails with markErr) and answers
// Committed with committed, err, recording the mark it was asked about.
type stubVerifier struct {
	mark      string
	markErr   error
	committed bool
	err       error
	setupErr  error

	asked  []string
	setups int
}

func (f *stubVerifier) Mark(context.Context, *sql.Tx) (string, error) { return f.mark, f.markErr }

func (f *stubVerifier) Committed(_ context.Context, _ *sql.DB, mark string) (bool, error) {
	f.asked = append(f.asked, mark)
	return f.committed, f.err
}

type stubSetup struct{ *stubVerifier }

func (f stubSetup) BeforeTx(context.Context, *sql.DB) error {
	f.setups++
	return f.setupErr
}

func TestVerifiers(t *testing.T) {
	errFirst, errSecond := errors.New("first cannot tell"), errors.New("fallback cannot tell")
	for _, tc := range []struct {
		name              string
		first, fallback   stubVerifier
		want              bool
		wantErr           []error
		wantAskedFallback bool
	}{
		{"first answers committed", stubVerifier{mark: "12@1", committed: true}, stubVerifier{mark: "k", committed: false}, true, nil, false},
		{"first answers not committed", stubVerifier{mark: "12@1"}, stubVerifier{mark: "k", committed: true}, false, nil, false},
		{"first fails, fallback answers", stubVerifier{mark: "12@1", err: errFirst}, stubVerifier{mark: "k", committed: true}, true, nil, true},
		{"first fails, fallback says not committed", stubVerifier{mark: "12@1", err: errFirst}, stubVerifier{mark: "k"}, false, nil, true},
		{"both fail: both errors", stubVerifier{mark: "12@1", err: errFirst}, stubVerifier{mark: "k", err: errSecond}, false, []error{errFirst, errSecond}, true},
		{"empty first mark travels", stubVerifier{mark: "", err: errFirst}, stubVerifier{mark: "k:x", committed: true}, true, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first, fallback := tc.first, tc.fallback
			v := Verifiers(&first, &fallback)
			mark, err := v.Mark(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := v.Committed(context.Background(), nil, mark)
			if got != tc.want || (err == nil) != (tc.wantErr == nil) {
				t.Fatalf("got %v, %v; want %v, %v", got, err, tc.want, tc.wantErr)
			}
			for _, want := range tc.wantErr {
				if !errors.Is(err, want) {
					t.Errorf("got %v, want it to match %v", err, want)
				}
			}
			if len(first.asked) != 1 || first.asked[0] != tc.first.mark {
				t.Errorf("first asked about %q, want [%q]", first.asked, tc.first.mark)
			}
			wantFallback := []string(nil)
			if tc.wantAskedFallback {
				wantFallback = []string{tc.fallback.mark}
			}
			if len(fallback.asked) != len(wantFallback) || (len(wantFallback) == 1 && fallback.asked[0] != wantFallback[0]) {
				t.Errorf("fallback asked about %q, want %q", fallback.asked, wantFallback)
			}
		})
	}
}

func TestVerifiersMarkError(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name            string
		first, fallback stubVerifier
	}{
		{"first", stubVerifier{markErr: boom}, stubVerifier{mark: "k"}},
		{"fallback", stubVerifier{mark: "m"}, stubVerifier{markErr: boom}},
	} {
		if _, err := Verifiers(&tc.first, &tc.fallback).Mark(context.Background(), nil); !errors.Is(err, boom) {
			t.Errorf("%s fails to mark: got %v, want %v", tc.name, err, boom)
		}
	}
}

func TestVerifiersNil(t *testing.T) {
	a := &stubVerifier{}
	if Verifiers(a, nil) != CommitVerifier(a) || Verifiers(nil, a) != CommitVerifier(a) {
		t.Error("Verifiers with a nil side: want the other verifier itself")
	}
	if Verifiers(nil, nil) != nil {
		t.Error("Verifiers(nil, nil): want nil")
	}
}

func TestVerifiersMalformedMark(t *testing.T) {
	v := Verifiers(&stubVerifier{committed: true}, &stubVerifier{committed: true})
	for _, mark := range []string{"", "x", "5:abc", "-1:abc", "abc:"} {
		if got, err := v.Committed(context.Background(), nil, mark); err == nil {
			t.Errorf("Committed(%q): got %v, nil; want an error", mark, got)
		}
	}
}

// TestVerifiersBeforeTx: BeforeTx reaches each verifier that has one, in
// order, and the first error stops it.
func TestVerifiersBeforeTx(t *testing.T) {
	boom := errors.New("boom")
	plain := &stubVerifier{}
	setup := stubSetup{&stubVerifier{}}
	v := Verifiers(plain, setup)
	if err := beforeTx(context.Background(), v, nil); err != nil {
		t.Fatal(err)
	}
	if setup.setups != 1 {
		t.Errorf("fallback's BeforeTx ran %d times, want 1", setup.setups)
	}
	failing := stubSetup{&stubVerifier{setupErr: boom}}
	if err := beforeTx(context.Background(), Verifiers(failing, setup), nil); !errors.Is(err, boom) {
		t.Errorf("got %v, want %v", err, boom)
	}
	if setup.setups != 1 {
		t.Errorf("fallback's BeforeTx ran after the first failed")
	}
	if err := beforeTx(context.Background(), plain, nil); err != nil {
		t.Errorf("a verifier without BeforeTx: got %v", err)
	}
}

// setupVerifier is tx_test.go's fakeVerifier with a BeforeTx that records
// how many transactions had begun when it ran, and fails while fail > 0.
type setupVerifier struct {
	*fakeVerifier
	beganBefore []int
	fail        int
}

func (v *setupVerifier) BeforeTx(ctx context.Context, db *sql.DB) error {
	v.beganBefore = append(v.beganBefore, v.srv.count("begin"))
	if v.fail > 0 {
		v.fail--
		return errDeadlock
	}
	return nil
}

// TestRunTxCallsBeforeTx: RunTx calls a TxSetup verifier's BeforeTx before
// each attempt opens its transaction; a failure of it fails that attempt
// before BEGIN, and it is retried; an Op that settles a COMMIT itself (a
// Verify, or Idempotent) does not use the verifier at all.
func TestRunTxCallsBeforeTx(t *testing.T) {
	for _, tc := range []struct {
		name       string
		op         Op
		faults     []*fault
		fail       int
		wantBefore []int
		wantBegin  int
	}{
		{"first try", Write("t", nil), nil, 0, []int{0}, 1},
		{"a deadlock victim: once per attempt", Write("t", nil), []*fault{{op: "exec", err: errDeadlock}}, 0, []int{0, 1}, 2},
		{"BeforeTx fails: the attempt fails before BEGIN, and is retried", Write("t", nil), nil, 1, []int{0, 0}, 1},
		{"an Op with a Verify: not called", Write("t", func(context.Context) (bool, error) { return false, nil }), nil, 0, nil, 1},
		{"Idempotent: not called", Idempotent("t"), nil, 0, nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newFakeServer(tc.faults...)
			db := sql.OpenDB(&fakeConnector{s: srv})
			defer db.Close()
			v := &setupVerifier{fakeVerifier: &fakeVerifier{srv: srv, want: 1}, fail: tc.fail}
			p := testPolicy(t, Config{MaxRetries: 2, CommitVerifier: v})
			if err := RunTx(context.Background(), db, p, tc.op, nil, addOne); err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(v.beganBefore); got != fmt.Sprint(tc.wantBefore) {
				t.Errorf("transactions begun at each BeforeTx: got %v, want %v", got, tc.wantBefore)
			}
			if got := srv.count("begin"); got != tc.wantBegin || srv.get("n") != 1 {
				t.Errorf("got %d transactions begun and n = %d, want %d and 1", got, srv.get("n"), tc.wantBegin)
			}
		})
	}
}
