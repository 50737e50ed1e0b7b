package sqlretry

import (
	"context"
	"errors"

	"github.com/sqlretry/sqlretry/internal/rawsql"
	"github.com/sqlretry/sqlretry/internal/sqltext"
)

// A read may call a function of a user's by the name of a built-in: on
// PostgreSQL a user's log(text) in search_path answers SELECT log('msg'),
// and t.audit calls audit(t); on MySQL a name the server does not build in
// is a stored function; on SQLite an application's function replaces a
// built-in. The text cannot say which, so such a read is replayed after a
// failure of unknown outcome only once the engine's catalog, asked then,
// holds no function of a user's by any of the names the text calls
// (sqltext.CalledNames, sqltext.CheckUserFuncs). The answer is not kept:
// a CREATE FUNCTION after it would make a kept one wrong.

// userFuncVerify returns the verify of a read-only statement whose text
// calls functions by names (sqltext.CalledNames) that a user's function may
// take on the connector's engine. It reads the engine's catalog on a
// connection of its own (the failed call holds its connection): "not
// applied" if no function of a user's has any of the names, so the read
// changed nothing and is replayed; an error otherwise, or when the catalog
// cannot be read, which ends the call in ErrAmbiguous. A transient failure
// to connect or read is retried by the Policy, as any verify's is.
//
// The answer does not depend on whether the failed attempt has ended on
// the server: a read that calls no function of a user's writes nothing
// however long it runs. So the Op needs no fence (VerifyWaits).
func (c *connector) userFuncVerify(names []string) VerifyFunc {
	return func(ctx context.Context) (bool, error) {
		ic, err := c.connectOnce(ctx)
		if err != nil {
			return false, err
		}
		defer ic.Close()
		err = sqltext.CheckUserFuncs(ctx, c.engine, names, func(ctx context.Context, q string, args []any) (bool, error) {
			return rawsql.Exists(ctx, ic, q, args)
		})
		if uf := (*sqltext.UserFuncError)(nil); errors.As(err, &uf) {
			return false, &verdictError{err: uf, class: Class{Phase: NotApplied, Code: "user-function",
				Reason: "a read that may have called a function of a user's, which may write: its outcome is unknown"}}
		}
		return false, err
	}
}
