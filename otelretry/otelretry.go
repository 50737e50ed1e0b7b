package otelretry

import (
	"context"
	"errors"
	"math"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/sqlretry/sqlretry"
)

// ScopeName is the instrumentation scope of the meter Observer uses.
const ScopeName = "github.com/sqlretry/sqlretry/otelretry"

// Observer is a [sqlretry.Observer] that records a Policy's events as
// OpenTelemetry metrics:
//
//	sqlretry.retries               retries started, by op, code, phase, kind
//	sqlretry.give_ups              calls that failed, by op and cause
//	sqlretry.ambiguous             calls that ended in ErrAmbiguous, by op
//	sqlretry.verifications         verifies, by op and verdict (applied, not-applied, failed)
//	sqlretry.budget.exhausted      retries refused for want of a token, by op
//	sqlretry.breaker.transitions   breaker state changes, by from and to
//
// and, for each Policy given to [Observer.RegisterPolicy], two gauges read
// when metrics are collected: sqlretry.budget.tokens and
// sqlretry.breaker.state (1 for the current state, 0 for the others).
//
// [Observer.ObserveContext] also adds each event to the span of a context
// as a span event. It is safe for concurrent use.
type Observer struct {
	meter                                 metric.Meter
	retries, giveUps, ambiguous           metric.Int64Counter
	verifications, exhausted, transitions metric.Int64Counter
	budgetTokens                          metric.Float64ObservableGauge
	breakerState                          metric.Int64ObservableGauge
}

var _ sqlretry.Observer = (*Observer)(nil)

// New returns an Observer whose instruments come from mp's meter named
// [ScopeName].
func New(mp metric.MeterProvider) (*Observer, error) {
	m := mp.Meter(ScopeName)
	o := &Observer{meter: m}
	var errs [8]error
	o.retries, errs[0] = m.Int64Counter("sqlretry.retries", metric.WithDescription("Retries started (each after a failed attempt)."), metric.WithUnit("{retry}"))
	o.giveUps, errs[1] = m.Int64Counter("sqlretry.give_ups", metric.WithDescription("Calls that ended in an error after running, by cause."), metric.WithUnit("{call}"))
	o.ambiguous, errs[2] = m.Int64Counter("sqlretry.ambiguous", metric.WithDescription("Calls whose outcome is unknown (ErrAmbiguous)."), metric.WithUnit("{call}"))
	o.verifications, errs[3] = m.Int64Counter("sqlretry.verifications", metric.WithDescription("Verifies of ambiguous writes, by verdict."), metric.WithUnit("{verify}"))
	o.exhausted, errs[4] = m.Int64Counter("sqlretry.budget.exhausted", metric.WithDescription("Retries refused for want of a budget token."), metric.WithUnit("{retry}"))
	o.transitions, errs[5] = m.Int64Counter("sqlretry.breaker.transitions", metric.WithDescription("Circuit breaker state changes."), metric.WithUnit("{transition}"))
	o.budgetTokens, errs[6] = m.Float64ObservableGauge("sqlretry.budget.tokens", metric.WithDescription("Retry budget level."), metric.WithUnit("{token}"))
	o.breakerState, errs[7] = m.Int64ObservableGauge("sqlretry.breaker.state", metric.WithDescription("1 for the breaker's current state, 0 for the others."))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	return o, nil
}

// Observe records e's metrics and adds e to the span of the call's
// context (e.Ctx), if it has a recording one: see [Observer.ObserveContext].
func (o *Observer) Observe(e sqlretry.Event) {
	ctx := e.Ctx
	if ctx == nil {
		ctx = context.Background() // a breaker change belongs to no call
	}
	o.ObserveContext(ctx, e)
}

// ObserveContext records e's metrics and adds e to ctx's span, if it is
// recording, as a span event named "sqlretry." and the event's kind
// ("sqlretry.retry", "sqlretry.give-up" …) with its op, attempt, code,
// phase and kind, and the wait, verdict, cause or breaker states where
// they apply.
func (o *Observer) ObserveContext(ctx context.Context, e sqlretry.Event) {
	op := attribute.String("op", e.Op)
	switch e.Kind {
	case sqlretry.EventRetry:
		o.retries.Add(ctx, 1, metric.WithAttributes(op, attribute.String("code", e.Class.Code),
			attribute.String("phase", e.Class.Phase.String()), attribute.String("kind", e.Class.Kind.String())))
	case sqlretry.EventGiveUp:
		o.giveUps.Add(ctx, 1, metric.WithAttributes(op, attribute.String("cause", Cause(e.Err))))
		if errors.Is(e.Err, sqlretry.ErrAmbiguous) {
			o.ambiguous.Add(ctx, 1, metric.WithAttributes(op))
		}
	case sqlretry.EventVerified, sqlretry.EventVerifyFailed:
		o.verifications.Add(ctx, 1, metric.WithAttributes(op, attribute.String("verdict", verdict(e))))
	case sqlretry.EventBudgetExhausted:
		o.exhausted.Add(ctx, 1, metric.WithAttributes(op))
	case sqlretry.EventBreakerStateChange:
		o.transitions.Add(ctx, 1, metric.WithAttributes(attribute.String("from", e.From.String()), attribute.String("to", e.To.String())))
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent("sqlretry."+e.Kind.String(), trace.WithAttributes(spanAttributes(e)...))
	}
}

// verdict names a verify's answer: "applied", "not-applied" or "failed".
func verdict(e sqlretry.Event) string {
	switch {
	case e.Kind == sqlretry.EventVerifyFailed:
		return "failed"
	case e.Applied:
		return "applied"
	}
	return "not-applied"
}

// spanAttributes are the attributes of e's span event.
func spanAttributes(e sqlretry.Event) []attribute.KeyValue {
	if e.Kind == sqlretry.EventBreakerStateChange {
		return []attribute.KeyValue{attribute.String("sqlretry.from", e.From.String()), attribute.String("sqlretry.to", e.To.String())}
	}
	a := []attribute.KeyValue{
		attribute.String("sqlretry.op", e.Op),
		attribute.Int("sqlretry.attempt", e.Attempt),
		attribute.String("sqlretry.code", e.Class.Code),
		attribute.String("sqlretry.phase", e.Class.Phase.String()),
		attribute.String("sqlretry.kind", e.Class.Kind.String()),
	}
	switch e.Kind {
	case sqlretry.EventRetry:
		a = append(a, attribute.Int64("sqlretry.wait_ms", e.Wait.Milliseconds()))
	case sqlretry.EventGiveUp:
		a = append(a, attribute.String("sqlretry.cause", Cause(e.Err)))
	case sqlretry.EventVerified, sqlretry.EventVerifyFailed:
		a = append(a, attribute.String("sqlretry.verdict", verdict(e)))
	}
	if e.Err != nil {
		a = append(a, attribute.String("sqlretry.error", e.Err.Error()))
	}
	return a
}

// Cause names why a call failed, from the error it returned: "ambiguous",
// "budget-exhausted", "circuit-open", "deadline" (the next wait would pass
// the caller's deadline), "context" (the caller's context ended),
// "retries-exhausted", "value-unknown", "permanent" (an error no retry
// could help, returned as it was), or "other" for a cause this version
// does not know.
func Cause(err error) string {
	var re *sqlretry.Error
	if !errors.As(err, &re) || re.Cause == nil {
		return "permanent"
	}
	for _, c := range causes { // ErrDeadline before the context errors it also matches
		if errors.Is(re.Cause, c.err) {
			return c.name
		}
	}
	return "other"
}

var causes = []struct {
	err  error
	name string
}{
	{sqlretry.ErrAmbiguous, "ambiguous"},
	{sqlretry.ErrBudgetExhausted, "budget-exhausted"},
	{sqlretry.ErrCircuitOpen, "circuit-open"},
	{sqlretry.ErrDeadline, "deadline"},
	{context.Canceled, "context"},
	{context.DeadlineExceeded, "context"},
	{sqlretry.ErrRetriesExhausted, "retries-exhausted"},
	{sqlretry.ErrValueUnknown, "value-unknown"},
}

// RegisterPolicy reports p's budget level and breaker state on the gauges
// each time metrics are collected, with attrs (say the database's name) to
// tell Policies apart. A Policy without a budget reports no level.
// Unregister the returned registration when p is retired.
func (o *Observer) RegisterPolicy(p *sqlretry.Policy, attrs ...attribute.KeyValue) (metric.Registration, error) {
	set := metric.WithAttributes(attrs...)
	return o.meter.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		s := p.Stats()
		if !math.IsInf(s.BudgetTokens, 0) {
			obs.ObserveFloat64(o.budgetTokens, s.BudgetTokens, set)
		}
		for _, st := range []sqlretry.BreakerState{sqlretry.BreakerClosed, sqlretry.BreakerOpen, sqlretry.BreakerHalfOpen} {
			v := int64(0)
			if st == s.Breaker {
				v = 1
			}
			obs.ObserveInt64(o.breakerState, v, metric.WithAttributes(slices.Concat(attrs, []attribute.KeyValue{attribute.String("state", st.String())})...))
		}
		return nil
	}, o.budgetTokens, o.breakerState)
}
