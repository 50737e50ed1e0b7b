package sqlretry

import (
	"context"
	"testing"
)

type ctxMarkKey struct{}

// Every event of a call carries the call's context, so an Observer can
// reach what the caller put there (OpenTelemetry's active span).
func TestEventsCarryTheCallsContext(t *testing.T) {
	var seen []Event
	p := testPolicy(t, Config{MaxRetries: 2, Observer: ObserverFunc(func(e Event) { seen = append(seen, e) })})
	ctx := context.WithValue(context.Background(), ctxMarkKey{}, "the caller's")
	_ = p.Do(ctx, Idempotent("read"), func(context.Context) error { return errDeadlock })
	if len(seen) < 3 {
		t.Fatalf("got %d events, want 2 retries and a give-up", len(seen))
	}
	for _, e := range seen {
		if e.Ctx == nil || e.Ctx.Value(ctxMarkKey{}) != "the caller's" {
			t.Errorf("%v event: Ctx does not carry the call's context", e.Kind)
		}
	}
}
