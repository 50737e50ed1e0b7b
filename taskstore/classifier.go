package taskstore

import (
	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/mysql"
	"github.com/sqlretry/sqlretry/postgres"
	"github.com/sqlretry/sqlretry/sqlite"
)

// Classifier returns the sqlretry classifier for d: the one a Store's
// default Policy uses, and the one to give your own Policy.
func Classifier(d Dialect) sqlretry.Classifier {
	switch d {
	case Postgres:
		return postgres.Classifier
	case MariaDB:
		return mysql.Classifier
	}
	return sqlite.Classifier
}
