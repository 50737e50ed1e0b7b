// Package pgxretry gives code that uses pgx directly (*pgxpool.Pool,
// pgx.Tx, sqlc's pgx/v5 output) the retry rules of package sqlretry.
package pgxretry
