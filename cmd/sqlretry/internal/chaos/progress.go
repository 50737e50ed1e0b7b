package chaos

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
)

// Progress shows a run's samples as they come: a progress bar on a
// terminal, else one plain line per second. It is safe for concurrent use.
type Progress struct {
	mu       sync.Mutex
	w        io.Writer
	terminal bool
	bar      *progressbar.ProgressBar
	naive    bool
	last     time.Duration
	started  bool
}

// NewProgress returns a Progress writing to w; terminal chooses the bar.
func NewProgress(w io.Writer, terminal bool) *Progress {
	return &Progress{w: w, terminal: terminal}
}

// Update shows s. Pass it as Config.Progress.
func (p *Progress) Update(s Sample) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.started || s.Naive != p.naive {
		p.finishLocked()
		p.started, p.naive, p.last = true, s.Naive, -time.Second
		if p.terminal {
			p.bar = progressbar.NewOptions64(s.Total.Milliseconds(),
				progressbar.OptionSetWriter(p.w),
				progressbar.OptionSetWidth(20),
				progressbar.OptionThrottle(100*time.Millisecond),
				progressbar.OptionShowDescriptionAtLineEnd(),
				progressbar.OptionSetPredictTime(false),
				progressbar.OptionSetElapsedTime(false),
				progressbar.OptionSetRenderBlankState(true),
			)
		}
	}
	line := describe(s)
	if p.bar != nil {
		p.bar.Describe(line)
		_ = p.bar.Set64(s.Elapsed.Milliseconds())
		return
	}
	if s.Elapsed-p.last >= time.Second || s.Elapsed >= s.Total {
		if s.Elapsed == p.last {
			return
		}
		p.last = s.Elapsed
		fmt.Fprintln(p.w, line)
	}
}

// Finish ends the bar, if one is shown.
func (p *Progress) Finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.finishLocked()
}

func (p *Progress) finishLocked() {
	if p.bar != nil {
		_ = p.bar.Finish()
		fmt.Fprintln(p.w)
		p.bar = nil
	}
}

func describe(s Sample) string {
	mode := "sqlretry"
	if s.Naive {
		mode = "naive"
	}
	budget := "off"
	if s.Budget >= 0 {
		budget = fmt.Sprintf("%.1f", s.Budget)
	}
	outage := "off"
	if s.Outage {
		outage = "ON"
	}
	return fmt.Sprintf("%s %5.1fs/%.0fs  ops %d  faults %d  retries %d  budget %s  outage %s",
		mode, s.Elapsed.Seconds(), s.Total.Seconds(), s.Ops, s.Faults, s.Retries, budget, outage)
}
