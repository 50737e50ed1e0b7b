package sqlretry

import (
	"context"
	"database/sql"
	"testing"
)

// Raw on a Connector's connection reaches the driver's own connection
// through UnwrapConn; a value that is not ours comes back as it is.
func TestUnwrapConnFakeDriver(t *testing.T) {
	srv := newFakeServer()
	db := sql.OpenDB(Connector(&fakeConnector{s: srv}, testPolicy(t, Config{})))
	defer db.Close()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	err = conn.Raw(func(dc any) error {
		if _, ok := dc.(*fakeConn); ok {
			t.Errorf("Raw handed the driver's connection without unwrapping; the test proves nothing")
		}
		if _, ok := UnwrapConn(dc).(*fakeConn); !ok {
			t.Errorf("UnwrapConn(%T) = %T, want *fakeConn", dc, UnwrapConn(dc))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	other := struct{ x int }{7}
	if got := UnwrapConn(other); got != other {
		t.Errorf("UnwrapConn(%v) = %v, want it unchanged", other, got)
	}
}
