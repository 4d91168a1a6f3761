package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/term"
)

// progress draws a one-line progress bar on a terminal (bytes, rate,
// ETA), redrawn at most every 100 ms; on anything else it draws nothing,
// so logs and pipes get only the final summary.
type progress struct {
	w     io.Writer
	width func() int // 0: not a terminal
	now   func() time.Time
	start time.Time
	last  time.Time
	drawn bool
}

// newProgress draws on w if w is a terminal.
func newProgress(w io.Writer) *progress {
	p := &progress{w: w, now: time.Now, width: func() int { return 0 }}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.width = func() int {
			if wd, _, err := term.GetSize(int(f.Fd())); err == nil && wd > 0 {
				return wd
			}
			return 80
		}
	}
	p.start = p.now()
	return p
}

// update shows done bytes of done+remaining (remaining 0: unknown).
func (p *progress) update(done, remaining int64) {
	width := p.width()
	if width == 0 {
		return
	}
	now := p.now()
	if p.drawn && now.Sub(p.last) < 100*time.Millisecond {
		return
	}
	p.last, p.drawn = now, true
	fmt.Fprint(p.w, "\r"+renderProgress(done, done+remaining, now.Sub(p.start), width))
}

// clear ends the bar's line, before the summary is printed.
func (p *progress) clear() {
	if p.drawn {
		fmt.Fprint(p.w, "\r"+strings.Repeat(" ", p.width()-1)+"\r")
	}
}

// renderProgress is one line of at most width-1 columns: percentage, bar,
// bytes done of total, rate, ETA. total <= done means the total is not
// known yet: no percentage, bar or ETA.
func renderProgress(done, total int64, elapsed time.Duration, width int) string {
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(done) / s
	}
	known := total > done
	stats := shortBytes(done)
	if known {
		stats += " / " + shortBytes(total)
	}
	stats += "  " + shortBytes(int64(rate)) + "/s"
	if known {
		eta := "--"
		if rate > 0 {
			eta = (time.Duration(float64(total-done)/rate*float64(time.Second)) + time.Second/2).Truncate(time.Second).String()
		}
		stats += "  ETA " + eta
	}
	line := stats
	if known {
		pct := float64(done) / float64(total)
		head := fmt.Sprintf("%3d%% ", int(pct*100))
		barW := width - 1 - len(head) - len(stats) - 4
		if barW >= 10 {
			fill := int(pct * float64(barW))
			bar := strings.Repeat("=", fill)
			if fill < barW {
				bar += ">" + strings.Repeat(" ", barW-fill-1)
			}
			line = head + "[" + bar + "]  " + stats
		} else {
			line = head + stats
		}
	}
	if len(line) > width-1 {
		line = line[:max(width-1, 0)]
	}
	return line
}

// shortBytes is a size with a binary unit: "12.3 MiB".
func shortBytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	v, u := float64(n)/1024, 0
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	return fmt.Sprintf("%.1f %s", v, units[u])
}
