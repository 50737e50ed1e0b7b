// Package otelretry reports a sqlretry Policy's events as OpenTelemetry
// metrics and span events: an [Observer] is a sqlretry.Observer.
//
//	o, err := otelretry.New(otel.GetMeterProvider())
//	p, err := sqlretry.New(sqlretry.Config{Classifier: postgres.Classifier, Observer: o})
//	_, err = o.RegisterPolicy(p, attribute.String("db.namespace", "orders")) // budget and breaker gauges
//
// Metrics: retries by op, code, phase and kind; give-ups by op and cause
// (ambiguous, budget-exhausted, circuit-open, deadline, context,
// retries-exhausted, value-unknown, permanent); ambiguous outcomes;
// verifications by verdict (applied, not-applied, failed); budget
// exhaustion; breaker transitions; and, per registered Policy, the budget's
// level and the breaker's state.
//
// Observe adds each event to the span of the call's context (Event.Ctx) as
// a span event, when the span is recording; ObserveContext does the same
// for a context given to it. Events are emitted only off the success path: a first-try
// success costs the Observer nothing.
//
// This module is separate from the library's so that sqlretry itself never
// requires OpenTelemetry.
package otelretry
