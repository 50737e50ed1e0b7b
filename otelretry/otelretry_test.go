package otelretry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/otelretry"
)

// Errors with fixed verdicts, so every count below is exact.
var (
	errDeadlock = errors.New("deadlock")
	errLost     = errors.New("connection lost")
	errSyntax   = errors.New("syntax error")
)

func classify(err error) sqlretry.Class {
	switch {
	case errors.Is(err, errDeadlock):
		return sqlretry.Class{Retryable: true, Phase: sqlretry.NotApplied, Code: "40P01", Kind: sqlretry.Contention}
	case errors.Is(err, errLost):
		return sqlretry.Class{Retryable: true, Phase: sqlretry.Unknown, Code: "conn-lost", Kind: sqlretry.Unavailable, Ended: true}
	}
	return sqlretry.Class{Phase: sqlretry.NotApplied, Code: "42601"}
}

// failing returns a function that fails with errs in turn, then succeeds.
func failing(errs ...error) func(context.Context) error {
	return func(context.Context) error {
		if len(errs) == 0 {
			return nil
		}
		err := errs[0]
		errs = errs[1:]
		return err
	}
}

// newPolicy returns a Policy with waits of a nanosecond whose events go to
// o, which finds the call's span in each event's context.
func newPolicy(t *testing.T, o *otelretry.Observer, budget *sqlretry.Budget, breaker *sqlretry.Breaker) *sqlretry.Policy {
	p, err := sqlretry.New(sqlretry.Config{
		Classifier: sqlretry.ClassifierFunc(classify), BaseDelay: time.Nanosecond, MaxDelay: time.Nanosecond,
		Budget: budget, Breaker: breaker,
		Observer: o,
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMetricsAndSpanEvents(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	o, err := otelretry.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		t.Fatal(err)
	}
	spans := tracetest.NewSpanRecorder()
	ctx, span := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)).Tracer("test").Start(context.Background(), "call")

	budget, err := sqlretry.NewBudget(sqlretry.BudgetConfig{Max: 1, Floor: sqlretry.NoFloor}) // one retry of an outage, then none
	if err != nil {
		t.Fatal(err)
	}
	p := newPolicy(t, o, budget, nil)
	if _, err := o.RegisterPolicy(p, attribute.String("db", "main")); err != nil {
		t.Fatal(err)
	}
	applied := func(context.Context) (bool, error) { return true, nil }
	calls := []struct {
		op      sqlretry.Op
		errs    []error
		wantErr bool
	}{
		{sqlretry.Idempotent("read"), []error{errDeadlock, errDeadlock}, false}, // two contention retries
		{sqlretry.Write("pay", applied), []error{errLost}, false},               // verified applied
		{sqlretry.Write("pay-blind", nil), []error{errLost}, true},              // ambiguous
		{sqlretry.Idempotent("scan"), []error{errLost, errLost, errLost}, true}, // the budget's one token, then exhausted
		{sqlretry.Idempotent("bad"), []error{errSyntax}, true},                  // permanent
	}
	for _, c := range calls {
		if err := p.Do(ctx, c.op, failing(c.errs...)); (err != nil) != c.wantErr {
			t.Fatalf("%s: got %v, want error %v", c.op.Name, err, c.wantErr)
		}
	}
	span.End()

	m := collect(t, reader)
	for _, w := range []struct {
		name  string
		attrs []attribute.KeyValue
		want  int64
	}{
		{"sqlretry.retries", kv("op", "read", "code", "40P01", "phase", "not-applied", "kind", "contention"), 2},
		{"sqlretry.retries", kv("op", "scan", "code", "conn-lost", "phase", "unknown", "kind", "unavailable"), 1},
		{"sqlretry.verifications", kv("op", "pay", "verdict", "applied"), 1},
		{"sqlretry.give_ups", kv("op", "pay-blind", "cause", "ambiguous"), 1},
		{"sqlretry.ambiguous", kv("op", "pay-blind"), 1},
		{"sqlretry.budget.exhausted", kv("op", "scan"), 1},
		{"sqlretry.give_ups", kv("op", "scan", "cause", "budget-exhausted"), 1},
		{"sqlretry.give_ups", kv("op", "bad", "cause", "permanent"), 1},
		{"sqlretry.breaker.state", kv("db", "main", "state", "closed"), 1},
		{"sqlretry.breaker.state", kv("db", "main", "state", "open"), 0},
	} {
		if got, ok := m.int(w.name, w.attrs); !ok || got != w.want {
			t.Errorf("%s%v = %d (found %v), want %d", w.name, w.attrs, got, ok, w.want)
		}
	}
	if got, ok := m.float("sqlretry.budget.tokens", kv("db", "main")); !ok || got != 0 {
		t.Errorf("sqlretry.budget.tokens = %v (found %v), want 0: the one token was spent", got, ok)
	}
	checkSpanEvents(t, spans.Ended())
}

// checkSpanEvents: every event of the calls is on the span, in order.
func checkSpanEvents(t *testing.T, ended []sdktrace.ReadOnlySpan) {
	if len(ended) != 1 {
		t.Fatalf("%d spans ended, want 1", len(ended))
	}
	var got []string
	for _, ev := range ended[0].Events() {
		got = append(got, ev.Name)
	}
	want := []string{
		"sqlretry.retry", "sqlretry.retry", // read
		"sqlretry.verified",                                               // pay
		"sqlretry.give-up",                                                // pay-blind
		"sqlretry.retry", "sqlretry.budget-exhausted", "sqlretry.give-up", // scan
		"sqlretry.give-up", // bad
	}
	if len(got) != len(want) {
		t.Fatalf("span events %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("span events %v, want %v", got, want)
		}
	}
	first := attribute.NewSet(ended[0].Events()[0].Attributes...)
	if v, _ := first.Value("sqlretry.code"); v.AsString() != "40P01" {
		t.Errorf("first span event's code = %q, want 40P01", v.AsString())
	}
}

// An open breaker: the transition is counted and the state gauge follows.
func TestBreakerState(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	o, err := otelretry.New(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		t.Fatal(err)
	}
	breaker, err := sqlretry.NewBreaker(sqlretry.BreakerConfig{ConsecutiveFailures: 1, OpenTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	p := newPolicy(t, o, sqlretry.NoBudget, breaker)
	if _, err := o.RegisterPolicy(p); err != nil {
		t.Fatal(err)
	}
	err = p.Do(context.Background(), sqlretry.Idempotent("x"), failing(errLost, errLost))
	if !errors.Is(err, sqlretry.ErrCircuitOpen) {
		t.Fatalf("got %v, want ErrCircuitOpen", err)
	}
	m := collect(t, reader)
	for _, w := range []struct {
		name  string
		attrs []attribute.KeyValue
		want  int64
	}{
		{"sqlretry.breaker.transitions", kv("from", "closed", "to", "open"), 1},
		{"sqlretry.breaker.state", kv("state", "open"), 1},
		{"sqlretry.breaker.state", kv("state", "closed"), 0},
		{"sqlretry.give_ups", kv("op", "x", "cause", "circuit-open"), 1},
	} {
		if got, ok := m.int(w.name, w.attrs); !ok || got != w.want {
			t.Errorf("%s%v = %d (found %v), want %d", w.name, w.attrs, got, ok, w.want)
		}
	}
	if _, ok := m.float("sqlretry.budget.tokens", nil); ok {
		t.Errorf("a Policy without a budget reported a budget level")
	}
}

func TestCause(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{errSyntax, "permanent"},
		{&sqlretry.Error{Cause: sqlretry.ErrDeadline}, "deadline"},
		{&sqlretry.Error{Cause: context.Canceled}, "context"},
		{&sqlretry.Error{Cause: sqlretry.ErrRetriesExhausted}, "retries-exhausted"},
		{&sqlretry.Error{Cause: sqlretry.ErrValueUnknown}, "value-unknown"},
		{&sqlretry.Error{Cause: errors.New("new sentinel")}, "other"},
	} {
		if got := otelretry.Cause(c.err); got != c.want {
			t.Errorf("Cause(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

// kv makes attributes from name, value pairs.
func kv(pairs ...string) []attribute.KeyValue {
	var a []attribute.KeyValue
	for i := 0; i+1 < len(pairs); i += 2 {
		a = append(a, attribute.String(pairs[i], pairs[i+1]))
	}
	return a
}

// collected is one collection's data points, by metric name.
type collected map[string]metricdata.Aggregation

func collect(t *testing.T, r *sdkmetric.ManualReader) collected {
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	m := collected{}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			m[mt.Name] = mt.Data
		}
	}
	return m
}

// int returns the value of the counter or gauge name at exactly attrs.
func (m collected) int(name string, attrs []attribute.KeyValue) (int64, bool) {
	var points []metricdata.DataPoint[int64]
	switch d := m[name].(type) {
	case metricdata.Sum[int64]:
		points = d.DataPoints
	case metricdata.Gauge[int64]:
		points = d.DataPoints
	}
	want := attribute.NewSet(attrs...)
	for _, dp := range points {
		if dp.Attributes.Equals(&want) {
			return dp.Value, true
		}
	}
	return 0, false
}

// float returns the value of the float gauge name at exactly attrs.
func (m collected) float(name string, attrs []attribute.KeyValue) (float64, bool) {
	d, _ := m[name].(metricdata.Gauge[float64])
	want := attribute.NewSet(attrs...)
	for _, dp := range d.DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp.Value, true
		}
	}
	return 0, false
}
