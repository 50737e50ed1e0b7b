package chaos

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Progress shows a run's samples as they come: on a terminal, one line
// redrawn in place (a carriage return, the frame, then "erase to the end of
// the line"), else one plain line per second. It is safe for concurrent
// use.
//
// Each frame is written whole, in one Write, and shows the sample as it
// is: an interrupted run's last frame stays at the time it reached, never
// jumps to 100 %.
type Progress struct {
	mu       sync.Mutex
	w        io.Writer
	terminal bool
	// Width, if > 0, is the terminal's width in columns: a frame is cut to
	// it, since a frame that wraps cannot be redrawn in place.
	Width   int
	run     string // the run being shown: its mode
	last    time.Duration
	started bool
	drawn   bool // a frame is on the terminal's current line
}

// NewProgress returns a Progress writing to w; terminal chooses frames
// redrawn in place.
func NewProgress(w io.Writer, terminal bool) *Progress {
	return &Progress{w: w, terminal: terminal}
}

// Update shows s. Pass it as Config.Progress.
func (p *Progress) Update(s Sample) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if run := sampleMode(s); !p.started || run != p.run {
		p.finishLocked()
		p.started, p.run, p.last = true, run, -time.Second
	}
	line := describe(s)
	if p.terminal {
		frame := bar(s.Elapsed, s.Total) + " " + line
		if p.Width > 1 && len(frame) >= p.Width {
			frame = frame[:p.Width-1]
		}
		fmt.Fprint(p.w, "\r"+frame+"\x1b[K")
		p.drawn = true
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

// Finish ends the line a terminal frame is on, so that what follows starts
// on a line of its own; the frame stays as last drawn.
func (p *Progress) Finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.finishLocked()
}

func (p *Progress) finishLocked() {
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}

// barWidth is the progress bar's width in cells.
const barWidth = 20

// bar draws the share of total that elapsed covers: "[=====>    ]  25%".
func bar(elapsed, total time.Duration) string {
	f := 1.0
	if total > 0 {
		f = min(max(float64(elapsed)/float64(total), 0), 1)
	}
	n := int(f * barWidth)
	cells := strings.Repeat("=", n)
	if n < barWidth {
		cells += ">" + strings.Repeat(" ", barWidth-n-1)
	}
	return fmt.Sprintf("[%s] %3.0f%%", cells, 100*f)
}

// sampleMode names the run a sample belongs to: the contention scenario's
// mode (Sample.Mode), else sqlretry or naive.
func sampleMode(s Sample) string {
	switch {
	case s.Mode != "":
		return s.Mode
	case s.Naive:
		return "naive"
	}
	return "sqlretry"
}

func describe(s Sample) string {
	budget := "off"
	if s.Budget >= 0 {
		budget = fmt.Sprintf("%.1f", s.Budget)
	}
	line := fmt.Sprintf("%s %5.1fs/%.0fs  ops %d  faults %d  retries %d  budget %s",
		sampleMode(s), s.Elapsed.Seconds(), s.Total.Seconds(), s.Ops, s.Faults, s.Retries, budget)
	if s.Mode != "" {
		return line // the contention scenario has no outage
	}
	outage := "off"
	if s.Outage {
		outage = "ON"
	}
	return line + "  outage " + outage
}
