package taskstore

import (
	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/postgres"
)

// Classifier returns the sqlretry classifier for d, the one a Store's
// default Policy uses.
func Classifier(d Dialect) sqlretry.Classifier {
	switch d {
	case Postgres:
		return postgres.Classifier
	case MariaDB:
		return mysqlStandIn
	}
	return sqliteStandIn
}
