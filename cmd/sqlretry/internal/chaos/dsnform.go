package chaos

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/sqlretry/sqlretry/cmd/sqlretry/internal/engine"
)

// DSNForms are the DSNs a run takes, in words: the help and the error for
// a DSN of none of these forms say them alike.
//
// The SQLite rule: the run creates the file, so a typo must not become a
// file. A name is SQLite's only when it says so: file:PATH (a URI, with
// ?query allowed), or a plain path whose name ends .db, .sqlite or .sqlite3.
// Anything else is none of the forms and is refused before anything is
// created; so is a file that exists, or a path whose directory does not.
const DSNForms = "a PostgreSQL URL (postgres://user@host:5432/db, or postgresql://) or libpq key=value settings " +
	"(host=H port=5432 user=U dbname=D); a go-sql-driver MySQL/MariaDB DSN (user:password@tcp(host:3306)/db); " +
	"or a new SQLite file: file:PATH, or a path ending .db, .sqlite or .sqlite3"

// libpqKey matches a libpq connection keyword starting a key=value
// setting: https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-PARAMKEYWORDS
var libpqKey = regexp.MustCompile(`(?i)(^|\s)(host|hostaddr|port|dbname|user|password|passfile|sslmode|sslrootcert|sslcert|sslkey|` +
	`service|connect_timeout|target_session_attrs|application_name|options)\s*=`)

// sqliteExts are the extensions that make a plain path an SQLite file.
var sqliteExts = []string{".db", ".sqlite", ".sqlite3"}

// hasSQLiteExt reports whether path's name ends with one of sqliteExts.
func hasSQLiteExt(path string) bool {
	l := strings.ToLower(path)
	for _, e := range sqliteExts {
		if strings.HasSuffix(l, e) && len(filepath.Base(l)) > len(e) {
			return true
		}
	}
	return false
}

// validateDSNForm refuses a DSN that is none of DSNForms, saying which
// form to use instead where it can tell (a mysql:// URL, a sqlite: name, a
// path without an SQLite extension), and an SQLite file the run cannot
// create. It reads the file system (the SQLite file's directory and the
// run's files) and changes nothing.
func (c Config) validateDSNForm() error {
	if c.DSN == "" {
		return nil
	}
	l := strings.ToLower(strings.TrimSpace(c.DSN))
	switch {
	case strings.HasPrefix(l, "mysql://") || strings.HasPrefix(l, "mariadb://"):
		return inputErr("--dsn", fmt.Errorf("go-sql-driver/mysql takes no URL: write %s (user:password@tcp(host:3306)/db)", mysqlDSNOf(c.DSN)))
	case strings.HasPrefix(l, "sqlite:") || strings.HasPrefix(l, "sqlite3:"):
		_, rest, _ := strings.Cut(c.DSN, ":")
		rest = strings.TrimPrefix(rest, "//") // sqlite:///abs/x.db: an empty host, then the path
		return inputErr("--dsn", fmt.Errorf("%q: an SQLite file is file:PATH or a path ending .db, .sqlite or .sqlite3: write file:%s",
			c.DSN, rest))
	}
	if _, _, ok := DSNEngine(c.DSN); !ok {
		return inputErr("--dsn", fmt.Errorf("%q is none of the forms chaos takes: %s", c.DSN, DSNForms))
	}
	if e, _, _ := DSNEngine(c.DSN); e != engine.SQLite {
		return nil
	}
	path, err := sqliteFile(c.DSN)
	if err != nil {
		return inputErr("--dsn", err)
	}
	dir := filepath.Dir(path)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return inputErr("--dsn", fmt.Errorf("SQLite file %s: its directory %s does not exist (the run creates the file, not directories)", path, dir))
	}
	for _, label := range c.sqliteLabels() {
		if p := sqliteRunPath(path, label); exists(p) {
			return inputErr("--dsn", fmt.Errorf("SQLite file %s exists; the run needs a new file (it checks whole tables)", p))
		}
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// sqliteLabels are the labels of the runs c makes on its SQLite file (see
// [sqliteRunPath]).
func (c Config) sqliteLabels() []string {
	if c.Scenario == ScenarioContention {
		labels := make([]string, len(contentionModes))
		for i, m := range contentionModes {
			labels[i] = strings.ReplaceAll(m, "_", "")
		}
		return labels
	}
	if c.Naive {
		return []string{"naive"}
	}
	return []string{"ours"}
}

// sqliteRunPath is the file a run labelled label makes of the DSN's path:
// the path itself for our run, path.label for any other (the naive run,
// the contention scenario's modes).
func sqliteRunPath(path, label string) string {
	if label == "ours" {
		return path
	}
	return path + "." + label
}

// sqliteFile reads the file an SQLite DSN names: file:PATH (a query after
// ? dropped; file:///PATH and file://localhost/PATH as SQLite reads URIs),
// or a plain path ending with one of sqliteExts.
func sqliteFile(dsn string) (string, error) {
	rest, isURI := strings.CutPrefix(dsn, "file:")
	if !isURI {
		if !hasSQLiteExt(dsn) {
			return "", fmt.Errorf("%q: a plain path is an SQLite file only when its name ends .db, .sqlite or .sqlite3; "+
				"name it so, or write file:%s", dsn, dsn)
		}
		return dsn, nil
	}
	path, _, _ := strings.Cut(rest, "?")
	if auth, p, ok := strings.Cut(strings.TrimPrefix(path, "//"), "/"); strings.HasPrefix(path, "//") {
		if !ok || (auth != "" && auth != "localhost") {
			return "", fmt.Errorf("%q: a file: URI names a local file, file:///PATH or file:PATH", dsn)
		}
		path = "/" + p
	}
	switch {
	case path == "" || strings.HasSuffix(path, "/"):
		return "", fmt.Errorf("%q names no file: write file:PATH", dsn)
	case strings.HasPrefix(path, ":memory:") || strings.Contains(strings.ToLower(rest), "mode=memory"):
		return "", fmt.Errorf("%q is an in-memory database: the run needs a file (its checks read the tables on connections of their own)", dsn)
	}
	return path, nil
}

// mysqlDSNOf rewrites a mysql:// URL in go-sql-driver's form, for the
// error that refuses the URL; the URL as it was if it does not parse.
func mysqlDSNOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "user:password@tcp(host:3306)/db"
	}
	host := u.Host
	if _, _, err := net.SplitHostPort(host); err != nil {
		host = net.JoinHostPort(strings.Trim(host, "[]"), "3306")
	}
	dsn := "tcp(" + host + ")/" + strings.TrimPrefix(u.Path, "/")
	if u.User != nil {
		dsn = u.User.String() + "@" + dsn
	} else {
		dsn = "@" + dsn
	}
	if u.RawQuery != "" {
		dsn += "?" + u.RawQuery
	}
	return dsn
}
