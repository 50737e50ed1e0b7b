module github.com/sqlretry/sqlretry/pgxretry

go 1.26.0

replace github.com/sqlretry/sqlretry => ../
