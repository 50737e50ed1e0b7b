package pgxretry

import (
	"context"
	"database/sql"
)

// LieAboutMarkers makes w's marker verifier answer every settle with
// answer: a liar the marker tests must catch.
func LieAboutMarkers(w *Pool, answer bool) {
	w.mk.committed = func(context.Context, *sql.DB, string) (bool, error) { return answer, nil }
}
