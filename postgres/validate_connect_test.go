package postgres

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	sr "github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/dbtest"
)

// A connection that pgx opened and then refused because the server is not
// the kind target_session_attrs asks for ("ValidateConnect failed": a
// primary not promoted yet, a standby during a failover) is a connect
// failure: nothing of the caller's was sent, and a retry reaches the
// promoted server. It was classified permanent, so a RunTx caller failed
// during every failover (issue 14's failover tests).
func TestValidateConnectFailedIsRetriedNotSent(t *testing.T) {
	dsn := dbtest.PostgresDSN(t)
	if strings.Contains(dsn, "?") {
		dsn += "&target_session_attrs=standby" // the shared server is a primary
	} else {
		dsn += "?target_session_attrs=standby"
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = db.PingContext(ctx)
	if err == nil {
		t.Fatal("a primary accepted target_session_attrs=standby; the test proves nothing")
	}
	c := Classify(err)
	if !c.Retryable || c.Phase != sr.NotSent || c.Kind != sr.Unavailable {
		t.Errorf("Classify(%v) = %+v; want retryable, not sent, unavailable", err, c)
	}
}
