package sqlretry

import (
	"context"
	"testing"
)

// HasOp and TakeOp give an Op attached with WithOp to one write only, as
// the Connector does: the first TakeOp has it, later ones and other
// contexts do not.
func TestTakeOpGivesTheOpOnce(t *testing.T) {
	bare := context.Background()
	if HasOp(bare) {
		t.Error("HasOp(context without an Op) = true")
	}
	ctx := WithOp(bare, Write("create-order", nil))
	if !HasOp(ctx) {
		t.Fatal("HasOp after WithOp = false")
	}
	op, ok := TakeOp(ctx)
	if !ok || op.Name != "create-order" {
		t.Fatalf("first TakeOp = %q, %v; want create-order, true", op.Name, ok)
	}
	if HasOp(ctx) {
		t.Error("HasOp after TakeOp = true: a second write would be settled by the first one's verify")
	}
	if op, ok := TakeOp(ctx); ok {
		t.Errorf("second TakeOp = %q, true; want nothing", op.Name)
	}
	if _, ok := TakeOp(bare); ok {
		t.Error("TakeOp(context without an Op) = true")
	}
}
