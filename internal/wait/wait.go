// Package wait holds the one context-aware sleep the library's packages
// share. Standard library only.
package wait

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx is done, and returns ctx's error if it ended
// the wait. A d of 0 or less returns ctx.Err() at once.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
