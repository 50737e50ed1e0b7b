package entretry_test

// The chaos harness is internal/txchaos, shared with the other integration
// modules; this file gives its names the spelling this package's tests
// (TestChaos and the helpers around it) were written against.

import (
	"testing"
	"time"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/internal/txchaos"
)

// engine is one database under test: a txchaos.Engine, with copies of
// the fields under the names this package's tests read.
type engine struct {
	*txchaos.Engine
	name, driver, dsn string
	classifier        sqlretry.Classifier
}

func (e *engine) q(query string) string                { return e.Q(query) }
func (e *engine) policy(t *testing.T) *sqlretry.Policy { return e.Policy(t) }

func engines(t *testing.T) []*engine {
	var es []*engine
	for _, x := range txchaos.Engines(t) {
		es = append(es, &engine{x, x.Name, x.Driver, x.DSN, x.Classifier})
	}
	return es
}

func schema(t *testing.T, e *engine) { txchaos.Schema(t, e.Engine) }

func chaosDuration() time.Duration { return txchaos.Duration() }

const (
	bumpRow     = txchaos.BumpRow
	insertValue = txchaos.InsertValue
	findValue   = txchaos.FindValue
)

type call = txchaos.Call

// group is a txchaos.Group; a local type, so the tests' unkeyed literals
// stay within their own package.
type group struct {
	name string
	run  call
}

// result is a group's tally; it prints as txchaos.Result does.
type result struct {
	txchaos.Result
	sample error
}

func runChaos(t *testing.T, e *engine, d time.Duration, groups []group) (map[string]*result, int) {
	var gs []txchaos.Group
	for _, g := range groups {
		gs = append(gs, txchaos.Group{Name: g.name, Run: g.run})
	}
	res, kills := txchaos.Run(t, e.Engine, d, gs)
	out := map[string]*result{}
	for name, r := range res {
		out[name] = &result{*r, r.Sample}
	}
	return out, kills
}

func assertSafe(t *testing.T, e *engine, name string, r *result) {
	t.Helper()
	var x *txchaos.Result // nil when the group made no call: AssertSafe says so
	if r != nil {
		x = &r.Result
	}
	txchaos.AssertSafe(t, e.Engine, name, x)
}
