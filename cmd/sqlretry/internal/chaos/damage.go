package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sqlretry/sqlretry"
	"github.com/sqlretry/sqlretry/taskstore"
)

// DamagePoint is the damage done by the operations that had finished
// Elapsed into the run: the invariants' violations among them, less those
// only the final tables show (see RunReport.DamageUntimed).
type DamagePoint struct {
	ElapsedMS    int64 `json:"elapsed_ms"`
	Lost         int   `json:"lost"`          // told OK, not in the database
	AppliedTwice int   `json:"applied_twice"` // a run, a transition or a completion recorded twice
	Misreported  int   `json:"misreported"`   // told failed, yet applied
}

// damagePoints is how many points the damage is counted at: each costs a
// read of the store's tables.
const damagePoints = 20

// damageMark is how many ledger entries had been recorded elapsed into
// the run.
type damageMark struct {
	elapsed time.Duration
	entries int
}

// damageEvery is how many samples pass between two damage marks: about
// damagePoints in a run that is not interrupted.
func (h *harness) damageEvery() int {
	return max(1, int(h.cfg.Duration/h.cfg.SampleEvery)/damagePoints)
}

// markDamage records the ledger's length now. Entries copies the ledger,
// so it is read at the marks alone, not at every sample.
func (h *harness) markDamage(elapsed time.Duration) {
	n := len(h.ledger.Entries())
	h.mu.Lock()
	h.marks = append(h.marks, damageMark{elapsed: elapsed, entries: n})
	h.mu.Unlock()
}

// damage counts the violations over time: at each mark, the store's check
// is run with the ledger as it stood then, so that each violation the
// ledger can place counts from the mark by which its operation had
// finished. Violations that no operation explains (a task completed twice,
// a series past its max) show in the tables alone: they are returned
// apart, not counted in the points.
func (h *harness) damage(ctx context.Context) ([]DamagePoint, int, error) {
	h.mu.Lock()
	marks := slices.Clone(h.marks)
	h.mu.Unlock()
	entries, starts := h.ledger.Entries(), h.ledger.Starts()
	base, err := h.checkPrefix(ctx, nil, starts)
	if err != nil {
		return nil, 0, err
	}
	var out []DamagePoint
	for _, m := range marks {
		rep, err := h.checkPrefix(ctx, entries[:min(m.entries, len(entries))], starts)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, DamagePoint{ElapsedMS: m.elapsed.Milliseconds(), Lost: rep.Lost - base.Lost,
			AppliedTwice: twice(rep) - twice(base), Misreported: rep.Misreported - base.Misreported})
	}
	return out, base.Lost + twice(base) + base.Misreported, nil
}

// twice is a check's writes applied more than once.
func twice(r taskstore.Report) int { return r.Duplicated + r.DoubleCounted + r.AuditMismatch }

// checkPrefix runs the store's check with a ledger holding entries alone.
func (h *harness) checkPrefix(ctx context.Context, entries []taskstore.Entry, starts map[string]int) (taskstore.Report, error) {
	l := taskstore.NewLedger()
	for _, e := range entries {
		l.Record(e, toldErr(e))
	}
	for id, n := range starts {
		for range n {
			l.HandlerStarted(id)
		}
	}
	return h.setup.Check(ctx, l)
}

// toldErr is an error that Ledger.Record reads as e's outcome again.
func toldErr(e taskstore.Entry) error {
	switch e.Outcome {
	case taskstore.ToldOK:
		return nil
	case taskstore.ToldAmbiguous:
		return fmt.Errorf("%s: %w", e.Err, sqlretry.ErrAmbiguous)
	case taskstore.ToldCanceled:
		return fmt.Errorf("%s: %w", e.Err, context.Canceled)
	}
	return errors.New(e.Err)
}

// elapsed is a point's time, for the plot.
func (p DamagePoint) elapsed() time.Duration { return time.Duration(p.ElapsedMS) * time.Millisecond }
