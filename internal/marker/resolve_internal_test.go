package marker

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"
)

// TestResolveAsksOnce: a schema the verifier cannot write
// unquoted ("App", "shop-main") leaves the table unqualified, and resolve
// then asks the server again at every BeforeTx, holding v.mu across the
// round trip: one extra query per transaction, for the verifier's life,
// and every RunTx of the process serialized behind it. It should ask once
// (or quote the name).
func TestResolveAsksOnce(t *testing.T) {
	var asked atomic.Int32
	d := testDialect
	d.Schema = func(context.Context, *sql.DB, Name) (string, error) {
		asked.Add(1)
		return "App-Main", nil
	}
	d.Quote = func(s string) string { return `"` + s + `"` }
	v, err := New(&d, Config{PruneEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if err := v.BeforeTx(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := asked.Load(); n > 1 {
		t.Errorf("the schema was asked %d times over 100 transactions; want once", n)
	}
}
