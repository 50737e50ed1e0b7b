package sqltext

import (
	"context"
	"strconv"
	"strings"
)

// QueryFunc runs query with args on a session of the engine that ran the
// read (not the read's own, which failed) and reports whether it returned a
// row.
type QueryFunc func(ctx context.Context, query string, args []any) (found bool, err error)

// UserFuncError says that a function of a user's by one of the names of a
// read may exist: the read may have written, and must not be replayed.
type UserFuncError struct {
	Names []string // the names asked about
	Where string   // the catalog that holds one
}

func (e *UserFuncError) Error() string {
	return "a function of a user's named " + strings.Join(e.Names, ", ") + " (" + e.Where +
		") may answer the read's call, and may have written"
}

// CheckUserFuncs asks engine e's catalog, through q, whether a function of a
// user's may answer a read's call of one of names ([CalledNames]'s list
// for e). It returns nil only when the catalog proves there is none, a
// *[UserFuncError] when there may be one, and q's error when the catalog
// cannot be read (a MySQL user without SELECT on mysql.func): the read's
// outcome is then unknown. No name: nil.
//
// The answer holds whether or not the failed attempt has ended (a function
// created after the attempt is found, which only costs the replay; one
// dropped since cannot have been called by the replay), so it needs no
// fence; it is asked at each replay decision, never cached.
//
// Every name in the queries is qualified and every operator taken from the
// engine's own catalog: a user's search_path or function cannot answer
// them in the catalog's stead.
func CheckUserFuncs(ctx context.Context, e Engine, names []string, q QueryFunc) error {
	if len(names) == 0 {
		return nil
	}
	qs := userFuncQueries(e, len(names))
	if len(qs) == 0 {
		return &UserFuncError{Names: names, Where: "no catalog this engine can be asked"}
	}
	args := make([]any, len(names))
	for i, n := range names {
		args[i] = n
	}
	for _, c := range qs {
		if c.exists != "" {
			there, err := q(ctx, c.exists, nil)
			if err != nil {
				return err
			}
			if !there {
				continue
			}
		}
		found, err := q(ctx, c.query, args)
		if err != nil {
			return err
		}
		if found {
			return &UserFuncError{Names: names, Where: c.where}
		}
	}
	return nil
}

// catalogQuery is one look-up of CheckUserFuncs: query finds a function by
// one of the names; exists, if set, first says whether the table it reads
// is there.
type catalogQuery struct {
	where, exists, query string
}

// userFuncQueries returns engine e's look-ups for n names.
func userFuncQueries(e Engine, n int) []catalogQuery {
	switch e {
	case Postgres:
		// Any function that initdb did not create: a user's in any schema
		// (search_path may name any, and changes per session), an
		// extension's, one a superuser created in pg_catalog. Objects
		// created after initdb have OIDs from FirstNormalObjectId, 16384,
		// up, also after the OID counter wraps around
		// (src/include/access/transam.h). Not its volatility: a STABLE
		// function may call a VOLATILE one that writes.
		return []catalogQuery{{where: "pg_catalog.pg_proc", query: "SELECT 1 FROM pg_catalog.pg_proc WHERE oid OPERATOR(pg_catalog.>=) 16384::pg_catalog.oid" +
			" AND proname OPERATOR(pg_catalog.=) ANY (ARRAY[" + placeholders(n, true) + "]::pg_catalog.name[]) LIMIT 1"}}
	case MySQL:
		// A stored function of any database (a session's default
		// database is the one its unqualified calls reach, and USE
		// changes it), a loadable function (CREATE FUNCTION … SONAME,
		// kept in mysql.func), or on MySQL 8.0 a component's, which only
		// performance_schema lists. Stored and loadable functions share
		// one namespace, and routine names ignore case
		// (https://dev.mysql.com/doc/refman/8.0/en/function-resolution.html).
		in := "(" + placeholders(n, false) + ")"
		return []catalogQuery{
			{where: "information_schema.ROUTINES", query: "SELECT 1 FROM information_schema.ROUTINES WHERE ROUTINE_TYPE = 'FUNCTION' AND LOWER(ROUTINE_NAME) IN " + in + " LIMIT 1"},
			{where: "mysql.func", query: "SELECT 1 FROM mysql.func WHERE LOWER(name) IN " + in + " LIMIT 1"},
			{
				where:  "performance_schema.user_defined_functions",
				exists: "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'performance_schema' AND TABLE_NAME = 'user_defined_functions'",
				query:  "SELECT 1 FROM performance_schema.user_defined_functions WHERE LOWER(UDF_NAME) IN " + in + " LIMIT 1",
			},
		}
	case SQLite:
		// The connection's application-defined functions; the query
		// calls no function, which one of them could replace.
		return []catalogQuery{{where: "pragma_function_list", query: "SELECT 1 FROM pragma_function_list WHERE builtin = 0 AND name COLLATE NOCASE IN (" + placeholders(n, false) + ") LIMIT 1"}}
	}
	return nil
}

// placeholders returns n parameter markers: $1, $2, … if numbered, else ?.
func placeholders(n int, numbered bool) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		if i > 1 {
			b.WriteString(", ")
		}
		if numbered {
			b.WriteString("$" + strconv.Itoa(i))
		} else {
			b.WriteByte('?')
		}
	}
	return b.String()
}
