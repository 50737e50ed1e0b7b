// Package engine is the command's one vocabulary of database engines: the
// names every subcommand's --engine accepts, their aliases, and what each
// name selects in the library (classifier, error table, crl code syntax).
package engine

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/crl"
	"github.com/sqlretry/sqlretry/mssql"
	"github.com/sqlretry/sqlretry/mysql"
	"github.com/sqlretry/sqlretry/postgres"
	"github.com/sqlretry/sqlretry/sqlite"
)

// Engine is a database engine. The zero value is no engine.
type Engine uint8

// The engines, in the order help texts list them.
const (
	SQLServer Engine = iota + 1 // SQL Server and Azure SQL: package mssql, error numbers
	Postgres                    // PostgreSQL: package postgres, SQLSTATEs
	Cockroach                   // CockroachDB: package postgres's Cockroach table, SQLSTATEs
	MySQL                       // MySQL and MariaDB: package mysql, error numbers
	SQLite                      // SQLite: package sqlite, result codes by number or name
)

// All is every engine.
var All = []Engine{SQLServer, Postgres, Cockroach, MySQL, SQLite}

// Row is one code of an engine's error table.
type Row struct {
	Code   string
	Class  sqlretry.Class
	Source string
}

type info struct {
	name       string   // the canonical name: what output prints
	aliases    []string // also accepted, case-insensitively
	classifier sqlretry.Classifier
	lookup     func(string) (sqlretry.Class, bool)
	valid      func(string) error
	table      func() []Row
}

var infos = map[Engine]info{
	SQLServer: {"sqlserver", []string{"mssql", "azuresql"}, mssql.Classifier, mssql.Lookup, mssql.ValidCode, func() []Row {
		return rows(mssql.Table(), func(e mssql.Entry) Row { return Row{e.Code, e.Class, e.Source} })
	}},
	Postgres: {"postgres", []string{"postgresql", "pg"}, postgres.Classifier, postgres.Lookup, postgres.ValidCode, func() []Row {
		return rows(postgres.Table(), func(e postgres.Entry) Row { return Row{e.Code, e.Class, e.Source} })
	}},
	Cockroach: {"cockroach", []string{"cockroachdb", "crdb"}, postgres.CockroachClassifier, postgres.CockroachLookup, postgres.ValidCode, func() []Row {
		return rows(postgres.CockroachTable(), func(e postgres.Entry) Row { return Row{e.Code, e.Class, e.Source} })
	}},
	MySQL: {"mysql", []string{"mariadb"}, mysql.Classifier, mysql.Lookup, mysql.ValidCode, func() []Row {
		return rows(mysql.Table(), func(e mysql.Entry) Row { return Row{e.Code, e.Class, e.Source} })
	}},
	SQLite: {"sqlite", []string{"sqlite3"}, sqlite.Classifier, sqlite.Lookup, sqlite.ValidCode, func() []Row {
		return rows(sqlite.Table(), func(e sqlite.Entry) Row { return Row{e.Code, e.Class, e.Source} })
	}},
}

func rows[E any](entries []E, f func(E) Row) []Row {
	out := make([]Row, len(entries))
	for i, e := range entries {
		out[i] = f(e)
	}
	return out
}

// Parse reads an engine name or alias, ignoring case, and checks that it is
// one of allowed (every engine when allowed is empty): the one parser
// behind every subcommand's --engine.
func Parse(s string, allowed ...Engine) (Engine, error) {
	if len(allowed) == 0 {
		allowed = All
	}
	want := strings.ToLower(strings.TrimSpace(s))
	for _, e := range All {
		in := infos[e]
		if want != in.name && !slices.Contains(in.aliases, want) {
			continue
		}
		if !slices.Contains(allowed, e) {
			return 0, fmt.Errorf("engine %s is not supported here (want %s)", in.name, Names(allowed...))
		}
		return e, nil
	}
	return 0, fmt.Errorf("unknown engine %q (want %s)", s, Names(allowed...))
}

// Names lists the canonical names of es (every engine when es is empty):
// "postgres, mysql or sqlite".
func Names(es ...Engine) string {
	if len(es) == 0 {
		es = All
	}
	names := make([]string, len(es))
	for i, e := range es {
		names[i] = e.String()
	}
	if len(names) == 1 {
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// Help describes the names of es and their aliases for a --help text:
// "postgres (postgresql, pg), mysql (mariadb)".
func Help(es ...Engine) string {
	if len(es) == 0 {
		es = All
	}
	parts := make([]string, len(es))
	for i, e := range es {
		in := infos[e]
		parts[i] = in.name
		if len(in.aliases) > 0 {
			parts[i] += " (" + strings.Join(in.aliases, ", ") + ")"
		}
	}
	return strings.Join(parts, ", ")
}

// String returns the engine's canonical name.
func (e Engine) String() string {
	if in, ok := infos[e]; ok {
		return in.name
	}
	return "Engine(" + strconv.Itoa(int(e)) + ")"
}

// Classifier returns the engine's classifier.
func (e Engine) Classifier() sqlretry.Classifier { return infos[e].classifier }

// Syntax returns how crl rules write the engine's error codes: SQLSTATEs
// for PostgreSQL and CockroachDB, numbers for the others (SQLite's
// classifier reports result code names, which no rule can name yet).
func (e Engine) Syntax() crl.Syntax {
	if e == Postgres || e == Cockroach {
		return crl.SQLState
	}
	return crl.Numbers
}

// Lookup returns the class of code in the engine's table, and whether the
// table lists it.
func (e Engine) Lookup(code string) (sqlretry.Class, bool) { return infos[e].lookup(code) }

// ValidCode reports whether code is well formed for the engine.
func (e Engine) ValidCode(code string) error { return infos[e].valid(code) }

// Table returns the engine's error table.
func (e Engine) Table() []Row { return infos[e].table() }

// NeutralCodes are the codes sqlretry.ClassifyNeutral reports for failures
// no engine names (a dial failure, a reset connection...): every engine's
// classifier falls back to it, so they are well-formed codes for any engine.
// The library keeps its list unexported; TestNeutralCodes holds this copy
// to it.
var NeutralCodes = []string{"client-state", "driver-skip", "context", "bad-conn", "dns", "dial", "conn-refused", "net-timeout", "eof", "conn-reset"}

// RuleError rewrites an error from package crl for the command's user:
// "rule 1, token "+4060" at offset 1: error number is not a whole number".
// crl's own text leads with the JDBC driver's resource key
// (R_invalidParameterNumber), which means nothing outside the driver's
// source. errors.As still finds the *crl.Error. Other errors are returned
// as they are.
func RuleError(err error) error {
	var ce *crl.Error
	if !errors.As(err, &ce) {
		return err
	}
	return &ruleError{ce}
}

type ruleError struct{ e *crl.Error }

func (r *ruleError) Unwrap() error { return r.e }

func (r *ruleError) Error() string {
	var b strings.Builder
	if r.e.Rule > 0 {
		fmt.Fprintf(&b, "rule %d, ", r.e.Rule)
	}
	fmt.Fprintf(&b, "token %q at offset %d: %s", r.e.Token, r.e.Pos, r.e.Msg)
	return b.String()
}
