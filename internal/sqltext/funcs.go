package sqltext

// A SELECT may call a function that writes: a PostgreSQL or MySQL function
// can INSERT, and nothing in the text says so. So a read-only statement may
// call only the built-in functions listed here, which read and compute and
// change nothing (aggregates, window functions, string, number, date, JSON
// and array functions common to the engines); any other call — a
// user-defined function, a built-in not listed — makes the text a write.
// Such a read is still retried when its failure proves nothing was applied;
// only after a failure of unknown outcome is it not replayed (mark it
// Idempotent, say with sqlretry.WithOp, to replay it anyway).
//
// A listed name is the built-in only if nothing of a user's answers to it:
// PostgreSQL resolves an unqualified call through search_path by argument
// types, MySQL an unknown name to a stored function, SQLite to an
// application-defined function (see userfuncs.go). A text that calls one is
// ReadOnly with Info.Calls set, and [CalledNames] says what a catalog must
// be asked before it is replayed.
var pureFuncs = map[string]bool{}

func init() {
	for _, f := range [...]string{
		// aggregates and window functions
		"count", "sum", "avg", "min", "max", "array_agg", "string_agg", "json_agg", "jsonb_agg",
		"json_object_agg", "jsonb_object_agg", "group_concat", "bool_and", "bool_or", "every",
		"stddev", "stddev_pop", "stddev_samp", "variance", "var_pop", "var_samp", "var", "stdev",
		"percentile_cont", "percentile_disc", "mode", "bit_and", "bit_or", "bit_xor", "listagg",
		"row_number", "rank", "dense_rank", "percent_rank", "cume_dist", "ntile", "lag", "lead",
		"first_value", "last_value", "nth_value", "grouping", "count_big", "checksum_agg",
		// conditionals and casts
		"coalesce", "nullif", "greatest", "least", "isnull", "ifnull", "nvl", "iif", "if", "cast",
		"try_cast", "convert", "try_convert", "choose",
		// numbers
		"abs", "ceil", "ceiling", "floor", "round", "trunc", "truncate", "mod", "power", "pow", "sqrt",
		"exp", "ln", "log", "log10", "log2", "sign", "pi", "degrees", "radians", "sin", "cos", "tan",
		"asin", "acos", "atan", "atan2", "random", "rand", "div", "width_bucket",
		// strings
		"lower", "upper", "lcase", "ucase", "initcap", "length", "len", "char_length",
		"character_length", "octet_length", "bit_length", "datalength", "substr", "substring",
		"trim", "ltrim", "rtrim", "btrim", "replace", "translate", "concat", "concat_ws", "left",
		"right", "lpad", "rpad", "reverse", "repeat", "replicate", "space", "position", "strpos",
		"instr", "locate", "charindex", "patindex", "split_part", "format", "printf", "quote",
		"quote_ident", "quote_literal", "chr", "char", "ascii", "unicode", "to_hex", "hex", "unhex",
		"md5", "sha1", "sha2", "sha256", "sha512", "encode", "decode", "stuff", "string_split",
		"regexp_replace", "regexp_matches", "regexp_match", "regexp_substr", "regexp_like",
		"regexp_instr", "regexp_count", "starts_with", "string_to_array", "array_to_string",
		"soundex", "difference", "collate", "glob", "like", "unistr", "normalize",
		// dates and times
		"now", "date_trunc", "date_part", "extract", "to_char", "to_date", "to_timestamp",
		"to_number", "date", "time", "datetime", "julianday", "strftime", "unixepoch",
		"date_format", "str_to_date", "date_add", "date_sub", "dateadd", "datediff",
		"datediff_big", "datepart", "datename", "datetrunc", "eomonth", "getdate", "getutcdate",
		"sysdatetime", "sysutcdatetime", "sysdatetimeoffset", "current_date", "current_time",
		"current_timestamp", "localtime", "localtimestamp", "clock_timestamp",
		"statement_timestamp", "transaction_timestamp", "timeofday", "age", "make_date",
		"make_time", "make_timestamp", "make_timestamptz", "make_interval", "year", "month", "day",
		"hour", "minute", "second", "week", "weekday", "dayofweek", "dayofmonth", "dayofyear",
		"quarter", "last_day", "timestampdiff", "timestampadd", "from_unixtime", "unix_timestamp",
		"curdate", "curtime", "sysdate", "utc_timestamp", "timezone", "isfinite",
		// JSON and arrays
		"json_extract", "json_extract_path", "json_extract_path_text", "jsonb_extract_path",
		"jsonb_extract_path_text", "json_value", "json_query", "json_object", "json_array",
		"json_build_object", "jsonb_build_object", "json_build_array", "jsonb_build_array",
		"to_json", "to_jsonb", "row_to_json", "array_to_json", "json_typeof", "jsonb_typeof",
		"jsonb_set", "jsonb_insert", "json_set", "json_insert", "json_replace", "json_remove",
		"json_contains", "json_contains_path", "json_keys", "json_length", "json_valid",
		"json_unquote", "json_quote", "json_each", "jsonb_each", "json_each_text",
		"jsonb_each_text", "json_array_elements", "jsonb_array_elements",
		"json_array_elements_text", "jsonb_array_elements_text", "jsonb_path_query",
		"jsonb_path_exists", "jsonb_strip_nulls", "jsonb_pretty", "openjson", "isjson",
		"json_group_array", "json_group_object", "json_tree", "json_patch",
		"array_length", "array_position", "array_positions", "array_append", "array_prepend",
		"array_cat", "array_remove", "array_replace", "array_dims", "array_lower", "array_upper",
		"cardinality", "unnest", "generate_series", "array", "row",
		// identity and introspection that only read
		"gen_random_uuid", "uuid_generate_v4", "uuid", "newid", "typeof", "pg_typeof", "version",
		"current_setting", "current_schema", "current_database", "current_user", "session_user",
		"database", "schema", "user", "db_name", "object_id", "schema_name", "suser_sname",
		"has_table_privilege", "pg_backend_pid", "connection_id", "last_insert_id", "lastval",
		"currval", "scope_identity", "ident_current", "changes", "total_changes",
		"last_insert_rowid", "found_rows", "row_count", "pg_is_in_recovery", "pg_xact_status",
		"pg_current_xact_id", "pg_current_xact_id_if_assigned", "txid_current",
		"pg_current_wal_lsn", "pg_walfile_name", "inet_server_addr", "inet_server_port",
		"pg_relation_size", "pg_total_relation_size", "pg_size_pretty", "pg_database_size",
		"exists", "in", "any", "all", "some", "values", "over", "filter", "within", "as",
		"using", "on", "from", "join", "lateral", "select", "where", "and", "or", "not", "by",
		"when", "then", "else", "case", "between", "is", "union", "except", "intersect", "limit",
		"offset", "distinct", "table", "interval", "window", "partition", "cube", "rollup",
		"sets", "having", "group", "order", "with", "recursive", "escape", "top", "fetch",
		"for", "of", "at", "zone", "to", "key", "share", "update", "nowait", "skip", "locked",
		"like", "ilike", "similar", "returns", "apply", "cross", "outer", "inner", "left",
		"right", "full", "natural", "only", "tablesample", "pivot", "unpivot", "match",
		"against", "elt", "field", "find_in_set", "mid", "ord", "bin", "oct", "conv", "insert",
		"pg_sleep", "sleep", "option", "index", "contains", "freetext", "containstable", "freetexttable",
		"materialized",
	} {
		pureFuncs[f] = true
	}
}

// chain is the dotted name being read: a, a.b, a."b".c, or (x).f.
type chain struct {
	before token // the token before the chain's first name
	head   token // its first name, or the token before the "." it follows when that is no name
	n      int   // its names so far; 0 when the last token was neither a name nor "."
}

// next extends ch with name token t, prev and prev2 being the two tokens
// before it.
func (ch *chain) next(l *lexer, t, prev, prev2 token) {
	switch {
	case !l.punct(prev, '.'):
		*ch = chain{before: prev, head: t, n: 1}
	case ch.n == 0:
		// A name after "." after something else: (x).f, t.*.f.
		*ch = chain{before: prev2, head: prev2, n: 2}
	default:
		ch.n++
	}
}

// readName judges name token t (a word or a quoted identifier), the last
// of chain ch, in a read: it reports false if t makes the text a write —
// a call of a function not known to be pure, a call by a quoted name, a
// call qualified by anything but an engine's own catalog (audit.log(…),
// x.y.f(…)) — and tells sink of a name a user's function may answer to: a
// call of a pure function by its bare name or as pg_catalog.f or sys.f, and
// the last name of a dotted chain that is no call (t.f), which PostgreSQL
// reads as the call f(t) when t has no column f (attribute notation).
func (l *lexer) readName(t token, ch *chain, sink *callSink) bool {
	quoted := t.kind == tokQuoted
	if !quoted && l.s[t.start] == '@' {
		// SQL Server's @variable is no function, and "@v(" no call
		// (PostgreSQL reads the same text as the operator @ before v).
		return true
	}
	if !l.isCall(ch.before) {
		if ch.n > 1 {
			if quoted && l.unicodeQuoted(t) {
				return false // U&"…": the name is what its escapes spell
			}
			sink.add(l, callAttr, t, false)
		}
		return true
	}
	if quoted {
		// Any quoted call is an unknown call, which may write: pureFuncs
		// holds keywords too ("in", "values", "update"), and a user's
		// function may be named as one; PostgreSQL does not fold a quoted
		// name's case. Reading a quoted pure function as a write costs a
		// read its replay, never an outcome.
		return false
	}
	if !l.pure(t) {
		return false
	}
	adjacent := t.end < len(l.s) && l.s[t.end] == '('
	switch {
	case ch.n == 1:
		sink.add(l, callBare, t, adjacent)
	case ch.n == 2 && ch.head.kind == tokWord && l.is(ch.head, "pg_catalog"):
		sink.add(l, callPGCatalog, t, adjacent)
	case ch.n == 2 && ch.head.kind == tokWord && l.is(ch.head, "sys"):
		sink.add(l, callSys, t, adjacent)
	default:
		return false // a schema's function (audit.log(…)), or x.y.f(…)
	}
	return true
}

// pure reports whether word t is in pureFuncs.
func (l *lexer) pure(t token) bool {
	var buf [32]byte
	if t.end-t.start > len(buf) {
		return false
	}
	b := buf[:t.end-t.start]
	for i := range b {
		c := l.s[t.start+i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		b[i] = c
	}
	return pureFuncs[string(b)] // the conversion in a map index does not allocate
}

// unicodeQuoted reports whether quoted token t is PostgreSQL's U&"…".
func (l *lexer) unicodeQuoted(t token) bool {
	return t.start >= 2 && l.s[t.start-1] == '&' && l.s[t.start-2]|0x20 == 'u'
}

// isCall reports whether the name just read, after prev, is called: "("
// follows, and it is not a type's size (CAST(x AS varchar(20)),
// x::numeric(10,2)), a table's column list (INSERT INTO t (a) under
// EXPLAIN) or a common table expression's columns (WITH t(n) AS).
func (l *lexer) isCall(prev token) bool {
	if !l.peekPunct('(') {
		return false
	}
	if l.punct(prev, ':') || prev.kind == tokWord && (l.is(prev, "as") || l.is(prev, "into")) {
		return false // a type: CAST(x AS varchar(20)), x::numeric(10,2); INSERT INTO t (a)
	}
	if after := *l; after.next().kind == tokPunct && after.skipBalanced() {
		if n := after.next(); n.kind == tokWord && l.is(n, "as") {
			// A common table expression's columns, WITH t(n) AS [[NOT]
			// MATERIALIZED] (…), not a call given an alias, FROM f() AS x.
			if n := after.next(); l.punct(n, '(') || n.kind == tokWord && (l.is(n, "materialized") || l.is(n, "not")) {
				return false
			}
		}
	}
	return true
}
