package taskstore

// TEMPORARY until packages mysql and sqlite land: minimal classifiers.

import (
	"errors"
	"strconv"

	"github.com/go-sql-driver/mysql"

	"github.com/sqlretry/sqlretry"
)

var mysqlStandIn = sqlretry.ClassifierFunc(func(err error) sqlretry.Class {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1213, 1205:
			return sqlretry.Class{Retryable: true, Phase: sqlretry.NotApplied, Code: strconv.Itoa(int(me.Number))}
		}
		return sqlretry.Class{Phase: sqlretry.NotApplied, Code: strconv.Itoa(int(me.Number))}
	}
	if errors.Is(err, mysql.ErrInvalidConn) {
		return sqlretry.Class{Retryable: true, Phase: sqlretry.Unknown, Code: "invalid-conn"}
	}
	return sqlretry.ClassifyNeutral(err)
})

var sqliteStandIn = sqlretry.ClassifierFunc(func(err error) sqlretry.Class {
	var se interface{ Code() int }
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case 5, 6:
			return sqlretry.Class{Retryable: true, Phase: sqlretry.NotApplied, Code: strconv.Itoa(se.Code())}
		}
		return sqlretry.Class{Phase: sqlretry.NotApplied, Code: strconv.Itoa(se.Code())}
	}
	return sqlretry.ClassifyNeutral(err)
})
