package sqltext

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// CheckUserFuncs asks each of the engine's catalogs, and the answer is
// "none" only if every one was read and held none.
func TestCheckUserFuncs(t *testing.T) {
	ctx := context.Background()
	var asked []string
	none := func(_ context.Context, q string, args []any) (bool, error) {
		asked = append(asked, q)
		return strings.HasPrefix(q, "SELECT 1 FROM information_schema.TABLES"), nil // the table is there
	}
	if err := CheckUserFuncs(ctx, MySQL, []string{"initcap", "count"}, none); err != nil {
		t.Fatalf("MySQL, no function: %v", err)
	}
	if len(asked) != 4 {
		t.Errorf("MySQL asked %d queries, want 4 (routines, mysql.func, the table's presence, performance_schema): %q", len(asked), asked)
	}
	for _, q := range asked {
		if strings.Contains(q, "?, ?") != strings.Contains(q, "IN (") {
			t.Errorf("MySQL query %q: want two markers in its list", q)
		}
	}
	denied := errors.New("1142 SELECT command denied to user for table 'func'")
	var ufe *UserFuncError
	for _, c := range []struct {
		e    Engine
		q    QueryFunc
		want func(error) bool
	}{
		{Postgres, func(context.Context, string, []any) (bool, error) { return true, nil }, func(err error) bool { return errors.As(err, &ufe) }},
		{Postgres, func(context.Context, string, []any) (bool, error) { return false, nil }, func(err error) bool { return err == nil }},
		{MySQL, func(_ context.Context, q string, _ []any) (bool, error) {
			if strings.Contains(q, "mysql.func") {
				return false, denied
			}
			return false, nil
		}, func(err error) bool { return err == denied }},
		{SQLite, func(context.Context, string, []any) (bool, error) { return true, nil }, func(err error) bool { return errors.As(err, &ufe) }},
		{AnyEngine, func(context.Context, string, []any) (bool, error) { return false, nil }, func(err error) bool { return errors.As(err, &ufe) }},
		{SQLServer, func(context.Context, string, []any) (bool, error) { return false, nil }, func(err error) bool { return errors.As(err, &ufe) }},
	} {
		if err := CheckUserFuncs(ctx, c.e, []string{"log"}, c.q); !c.want(err) {
			t.Errorf("CheckUserFuncs(%v): %v", c.e, err)
		}
	}
	if err := CheckUserFuncs(ctx, AnyEngine, nil, nil); err != nil {
		t.Errorf("no name: %v, want nil", err)
	}
	var gotArgs []any
	_ = CheckUserFuncs(ctx, Postgres, []string{"log", "lower"}, func(_ context.Context, q string, args []any) (bool, error) {
		if !strings.Contains(q, "ARRAY[$1, $2]") {
			t.Errorf("PostgreSQL query %q: want $1, $2", q)
		}
		gotArgs = args
		return false, nil
	})
	if !reflect.DeepEqual(gotArgs, []any{"log", "lower"}) {
		t.Errorf("PostgreSQL arguments %v", gotArgs)
	}
}
