package pgxretry_test

// A hand-written stand-in for sqlc's pgx/v5 output (sql_package: pgx/v5),
// shaped as sqlc generates it: a DBTX interface, New(db DBTX) *Queries,
// and one method per query. The wrapper must satisfy DBTX unchanged.

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

type DBTX interface {
	Exec(context.Context, string, ...interface{}) (pgconn.CommandTag, error)
	Query(context.Context, string, ...interface{}) (pgx.Rows, error)
	QueryRow(context.Context, string, ...interface{}) pgx.Row
	CopyFrom(ctx context.Context, tableName pgx.Identifier, columnNames []string, rowSrc pgx.CopyFromSource) (int64, error)
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}

func NewQueries(db DBTX) *Queries { return &Queries{db: db} }

type Queries struct{ db DBTX }

// WithTx is sqlc's: the same queries inside a transaction.
func (q *Queries) WithTx(tx pgx.Tx) *Queries { return &Queries{db: tx} }

type Item struct {
	Seq    int64
	CallID int64
	Note   string
}

const createItem = `-- name: CreateItem :one
INSERT INTO items (call_id, note) VALUES ($1, $2)
RETURNING seq, call_id, note
`

func (q *Queries) CreateItem(ctx context.Context, callID int64, note string) (Item, error) {
	row := q.db.QueryRow(ctx, createItem, callID, note)
	var i Item
	err := row.Scan(&i.Seq, &i.CallID, &i.Note)
	return i, err
}

const insertItem = `-- name: InsertItem :exec
INSERT INTO items (call_id, note) VALUES ($1, $2)
`

func (q *Queries) InsertItem(ctx context.Context, callID int64, note string) error {
	_, err := q.db.Exec(ctx, insertItem, callID, note)
	return err
}

const countItems = `-- name: CountItems :one
SELECT count(*) FROM items WHERE call_id = $1
`

func (q *Queries) CountItems(ctx context.Context, callID int64) (int64, error) {
	row := q.db.QueryRow(ctx, countItems, callID)
	var count int64
	err := row.Scan(&count)
	return count, err
}

const listItems = `-- name: ListItems :many
SELECT seq, call_id, note FROM items WHERE call_id >= $1 ORDER BY seq LIMIT 20
`

func (q *Queries) ListItems(ctx context.Context, from int64) ([]Item, error) {
	rows, err := q.db.Query(ctx, listItems, from)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var items []Item
	for rows.Next() {
		var i Item
		if err := rows.Scan(&i.Seq, &i.CallID, &i.Note); err != nil {
			return nil, err
		}
		items = append(items, i)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return items, nil
}

type CopyItemsParams struct {
	CallID int64
	Note   string
}

// CopyItems is sqlc's :copyfrom.
func (q *Queries) CopyItems(ctx context.Context, arg []CopyItemsParams) (int64, error) {
	return q.db.CopyFrom(ctx, []string{"items"}, []string{"call_id", "note"}, &iteratorForCopyItems{rows: arg})
}

type iteratorForCopyItems struct {
	rows                 []CopyItemsParams
	skippedFirstNextCall bool
}

func (r *iteratorForCopyItems) Next() bool {
	if len(r.rows) == 0 {
		return false
	}
	if !r.skippedFirstNextCall {
		r.skippedFirstNextCall = true
		return true
	}
	r.rows = r.rows[1:]
	return len(r.rows) > 0
}

func (r iteratorForCopyItems) Values() ([]interface{}, error) {
	return []interface{}{r.rows[0].CallID, r.rows[0].Note}, nil
}

func (r iteratorForCopyItems) Err() error { return nil }
