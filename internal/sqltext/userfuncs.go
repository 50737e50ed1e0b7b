package sqltext

// A read may call a function of a user's where its text names a built-in:
//
//   - PostgreSQL resolves an unqualified call through search_path and by
//     argument types: with a user's log(text) in any schema of the path,
//     SELECT log('msg') runs it, an unknown-typed literal preferring the
//     string category ("Function Type Resolution",
//     https://www.postgresql.org/docs/current/typeconv-func.html); with
//     pg_catalog named after the user's schema in search_path, even an exact
//     match is the user's ("The Schema Search Path",
//     https://www.postgresql.org/docs/current/ddl-schemas.html). It reads
//     t.f, for a t without a column f, as the call f(t) ("SQL Functions on
//     Composite Types": functional and attribute notation,
//     https://www.postgresql.org/docs/current/xfunc-sql.html), and EXPLAIN
//     without ANALYZE evaluates an IMMUTABLE function with constant
//     arguments while it plans. A function's volatility proves nothing: a
//     STABLE or IMMUTABLE function may call a VOLATILE one that writes
//     ("This is not a completely bulletproof test, since such functions
//     could still call VOLATILE functions that modify the database",
//     https://www.postgresql.org/docs/current/xfunc-volatility.html;
//     measured on PostgreSQL 15: the INSERT lands).
//   - MySQL and MariaDB resolve an unqualified name that is a built-in
//     function to the built-in, whatever stored function has that name
//     ("Built-in functions and stored functions: ... the server resolves
//     PI() without a qualifier as a reference to the built-in function",
//     MySQL manual, "Function Name Parsing and Resolution",
//     https://dev.mysql.com/doc/refman/8.0/en/function-resolution.html);
//     any other name is a loadable function or a stored function of the
//     default database. A built-in whose name the parser reads specially
//     (COUNT, SUM, TRIM, …, and MariaDB's window functions) is that
//     built-in only when "(" follows at once: with IGNORE_SPACE off,
//     "count (1)" and "count/**/(1)" call a stored function count (the
//     same page; measured on MariaDB 10.11). The characteristics NO SQL
//     and READS SQL DATA are advisory ("The server does not use them to
//     constrain what kinds of statements a routine is permitted to
//     execute", https://dev.mysql.com/doc/refman/8.0/en/create-procedure.html;
//     measured: a NO SQL function's INSERT lands).
//   - SQL Server calls a scalar user-defined function only by a name with
//     its schema ("Scalar-valued functions must be invoked by using at
//     least the two-part name of the function",
//     https://learn.microsoft.com/sql/t-sql/statements/create-function-transact-sql),
//     and no user-defined function may modify the database ("User-defined
//     functions can't be used to perform actions that modify the database
//     state", https://learn.microsoft.com/sql/relational-databases/user-defined-functions/create-user-defined-functions-database-engine):
//     a bare name is a built-in. The sys schema holds only the system's.
//   - SQLite lets an application's function replace a built-in ("Built-in
//     SQL functions may be overloaded by new application-defined
//     functions", https://www.sqlite.org/c3ref/create_function.html), which
//     PRAGMA function_list shows with builtin = 0
//     (https://www.sqlite.org/pragma.html#pragma_function_list).
//
// So a text whose every call is a known pure built-in by its bare name is
// read-only only where the engine's catalog holds no function of a user's
// by any of those names: [CalledNames] lists them per engine, and
// [CheckUserFuncs] asks the catalog.

// callKind is how a read names a function a user's may answer to.
type callKind uint8

const (
	callBare      callKind = iota // f(…)
	callPGCatalog                 // pg_catalog.f(…): PostgreSQL's own catalog
	callSys                       // sys.f(…): SQL Server's system schema
	callAttr                      // t.f with no "(": PostgreSQL's attribute notation
)

// called is one name a read calls, or may call.
type called struct {
	kind     callKind
	name     string // lower-cased if written bare, as written (unescaped) if quoted
	adjacent bool   // "(" follows the name at once
}

// callSink receives the names a reading finds; the nil sink takes none. With
// list nil it only records that there was one.
type callSink struct {
	found bool
	list  *[]called
}

// add records name token t, found as kind.
func (s *callSink) add(l *lexer, kind callKind, t token, adjacent bool) {
	if s == nil {
		return
	}
	s.found = true
	if s.list == nil {
		return
	}
	*s.list = append(*s.list, called{kind: kind, name: l.nameText(t), adjacent: adjacent})
}

// nameText returns the name token t stands for: a word lower-cased (ASCII
// only, as PostgreSQL folds an unquoted name under a multibyte encoding),
// a quoted name without its quotes, a doubled closing quote read as one.
func (l *lexer) nameText(t token) string {
	w := l.s[t.start:t.end]
	if t.kind != tokQuoted {
		b := []byte(w)
		for i, c := range b {
			if c >= 'A' && c <= 'Z' {
				b[i] = c + 'a' - 'A'
			}
		}
		return string(b)
	}
	end := w[len(w)-1]
	inner := w[1 : len(w)-1]
	b := make([]byte, 0, len(inner))
	for i := 0; i < len(inner); i++ {
		b = append(b, inner[i])
		if inner[i] == end && i+1 < len(inner) && inner[i+1] == end {
			i++
		}
	}
	return string(b)
}

// engineDialects are the lexical rules of engine e's settings.
func engineDialects(e Engine) []dialect {
	switch e {
	case Postgres:
		return []dialect{dlPostgres, dlPostgresEscape}
	case MySQL:
		return []dialect{dlMySQL, dlMySQLNoEscape, dlMySQLANSIQuotes, dlMySQLMultibyte}
	case SQLServer:
		return []dialect{dlSQLServer}
	case SQLite:
		return []dialect{dlSQLite}
	}
	return nil
}

// pgNameLen is the longest name PostgreSQL keeps: NAMEDATALEN - 1 bytes
// in a default build; it truncates a longer one, keeping whole characters
// (src/include/pg_config_manual.h, truncate_identifier).
const pgNameLen = 63

// CalledNames returns the names of the functions that a read-only text
// (one that [Analyze] finds ReadOnly with Calls set) calls, or may call,
// by a name that a function of a user's may take on engine e: the names
// [CheckUserFuncs] must find no such function for before the text may be
// replayed as a read. ok is false if the text cannot be read-only on e
// whatever its catalog holds: it is not read-only, it names a function in a
// schema that is not e's catalog (pg_catalog.f on MySQL, where pg_catalog
// would be a database of a user's), or e is [AnyEngine], whose catalog
// cannot be asked. names is empty, with ok true, when e resolves every
// name the text uses to its built-in (SQL Server; MySQL built-ins called
// with "(" right after the name). It allocates; it is for the replay
// decision after a failure, not for every statement.
func CalledNames(e Engine, s string) (names []string, ok bool) {
	var list []called
	sink := &callSink{list: &list}
	if !readOnlyText(s, sink) {
		return nil, false
	}
	if e == AnyEngine {
		return nil, !sink.found
	}
	if divergent(s) {
		// Each of e's readings may see other names: ask about all.
		list = list[:0]
		for _, d := range engineDialects(e) {
			if !readOnly(s, d, 0, sink) {
				return nil, false
			}
		}
	}
	seen := map[string]bool{}
	addName := func(n string) {
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	for _, c := range list {
		switch {
		case e == Postgres && c.kind != callSys:
			addName(c.name)
			if len(c.name) > pgNameLen {
				n := pgNameLen
				for n > 0 && c.name[n]&0xc0 == 0x80 {
					n-- // keep whole UTF-8 characters
				}
				addName(c.name[:n])
			}
		case e == MySQL && c.kind == callBare:
			if mysqlReserved[c.name] || c.adjacent && mysqlBuiltins[c.name] {
				continue
			}
			addName(c.name)
		case e == SQLServer && (c.kind == callBare || c.kind == callSys):
		case e == SQLite && c.kind == callBare:
			addName(c.name)
		case c.kind == callAttr:
			// Only PostgreSQL reads t.f as a call.
		default:
			return nil, false // pg_catalog.f or sys.f where that is a user's schema
		}
	}
	return names, true
}

// mysqlBuiltins are the names of pureFuncs that are built-in functions of
// MySQL 8.0 ("Built-In Function and Operator Reference",
// https://dev.mysql.com/doc/refman/8.0/en/built-in-function-reference.html)
// and that MariaDB 10.11 resolves to its built-in when a stored function of
// that name exists (measured: CREATE FUNCTION `name`(x INT) … RETURN 4242,
// then SELECT name(1) in the function's database). Names built in on one of
// the two only (MariaDB's TO_CHAR, CHR, NVL, JSON_QUERY, DECODE; MySQL's
// REGEXP_LIKE, GROUPING) are not here: the other resolves them to a stored
// function.
var mysqlBuiltins = map[string]bool{}

// mysqlReserved are the names of pureFuncs that are reserved words of MySQL
// 8.0 ("Keywords and Reserved Words",
// https://dev.mysql.com/doc/refman/8.0/en/keywords.html) and that MariaDB
// 10.11 parses as syntax before "(" (measured as above: a syntax error or
// its own construct, never the stored function): IN (…), EXISTS (…),
// OVER (…) are no calls, with or without a space. EXCEPT, INTERSECT (8.0.31)
// and LATERAL (8.0.14) are reserved only in later releases of 8.0, so they
// are not here.
var mysqlReserved = map[string]bool{}

func init() {
	for _, f := range [...]string{
		"abs", "acos", "ascii", "asin", "atan", "atan2", "avg", "bin", "bit_and", "bit_length",
		"bit_or", "bit_xor", "cast", "ceil", "ceiling", "char", "char_length", "character_length",
		"coalesce", "concat", "concat_ws", "connection_id", "conv", "convert", "cos", "count",
		"cume_dist", "curdate", "current_date", "current_time", "current_timestamp",
		"current_user", "curtime", "database", "date", "date_add", "date_format", "date_sub",
		"datediff", "day", "dayofmonth", "dayofweek", "dayofyear", "degrees", "dense_rank", "elt",
		"exp", "extract", "field", "find_in_set", "first_value", "floor", "format", "found_rows",
		"from_unixtime", "greatest", "group_concat", "hex", "hour", "if", "ifnull", "insert",
		"instr", "interval", "isnull", "json_array", "json_contains", "json_contains_path",
		"json_extract", "json_insert", "json_keys", "json_length", "json_object", "json_quote",
		"json_remove", "json_replace", "json_set", "json_unquote", "json_valid", "json_value",
		"lag", "last_day", "last_insert_id", "last_value", "lcase", "lead", "least", "left",
		"length", "ln", "localtime", "localtimestamp", "locate", "log", "log10", "log2", "lower",
		"lpad", "ltrim", "max", "md5", "mid", "min", "minute", "mod", "month", "now", "nth_value",
		"ntile", "nullif", "oct", "octet_length", "ord", "percent_rank", "pi", "position", "pow",
		"power", "quarter", "quote", "radians", "rand", "rank", "regexp_instr", "regexp_replace",
		"regexp_substr", "repeat", "replace", "reverse", "right", "round", "row_count",
		"row_number", "rpad", "rtrim", "schema", "second", "session_user", "sha1", "sha2", "sign",
		"sin", "sleep", "soundex", "space", "sqrt", "stddev", "stddev_pop", "stddev_samp",
		"str_to_date", "substr", "substring", "sum", "sysdate", "tan", "time", "timestampadd",
		"timestampdiff", "trim", "truncate", "ucase", "unhex", "unix_timestamp", "upper", "user",
		"utc_timestamp", "uuid", "values", "var_pop", "var_samp", "variance", "version", "week",
		"weekday", "year",
	} {
		if !pureFuncs[f] {
			panic("sqltext: mysqlBuiltins holds " + f + ", which pureFuncs lacks")
		}
		mysqlBuiltins[f] = true
	}
	for _, f := range [...]string{
		"all", "and", "as", "between", "by", "case", "collate", "cross", "distinct", "div", "else",
		"exists", "fetch", "for", "from", "group", "having", "in", "index", "inner",
		"is", "join", "key", "like", "limit", "match", "natural", "not",
		"on", "option", "or", "order", "outer", "over", "partition", "recursive", "row", "select",
		"table", "then", "to", "union", "update", "using", "when", "where", "window", "with",
	} {
		if !pureFuncs[f] {
			panic("sqltext: mysqlReserved holds " + f + ", which pureFuncs lacks")
		}
		mysqlReserved[f] = true
	}
}
