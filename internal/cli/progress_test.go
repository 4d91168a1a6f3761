package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestRenderProgress(t *testing.T) {
	for _, tc := range []struct {
		done, total int64
		elapsed     time.Duration
		width       int
		want        string
	}{
		{512 << 20, 1 << 30, 4 * time.Second, 80, " 50% [===============>              ]  512.0 MiB / 1.0 GiB  128.0 MiB/s  ETA 4s"},
		{1 << 30, 1 << 30, 8 * time.Second, 80, "1.0 GiB  128.0 MiB/s"}, // total unknown (or reached): no bar, no ETA
		{0, 1 << 30, 0, 80, "  0% [>                                         ]  0 B / 1.0 GiB  0 B/s  ETA --"},
		{512 << 20, 1 << 30, 4 * time.Second, 50, " 50% 512.0 MiB / 1.0 GiB  128.0 MiB/s  ETA 4s"}, // too narrow for a bar
		{512 << 20, 1 << 30, 4 * time.Second, 20, " 50% 512.0 MiB / 1."},                           // cut to the width
	} {
		got := renderProgress(tc.done, tc.total, tc.elapsed, tc.width)
		if got != tc.want {
			t.Errorf("renderProgress(%d, %d, %v, %d)\n got %q\nwant %q", tc.done, tc.total, tc.elapsed, tc.width, got, tc.want)
		}
		if len(got) > tc.width-1 {
			t.Errorf("line of %d columns for width %d", len(got), tc.width)
		}
	}
}

// A fake terminal: progress draws at most every 100 ms and clears its
// line before the summary; on a non-terminal it draws nothing.
func TestProgressRedrawsAndClears(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(0, 0)
	p := &progress{w: &buf, width: func() int { return 60 }, now: func() time.Time { return now }, start: now}
	p.update(10, 90)
	now = now.Add(50 * time.Millisecond)
	p.update(20, 80) // too soon: not drawn
	now = now.Add(60 * time.Millisecond)
	p.update(30, 70)
	p.clear()
	out := buf.String()
	if n := strings.Count(out, "%"); n != 2 {
		t.Errorf("drew %d bars, want 2 (one update came within 100 ms): %q", n, out)
	}
	if !strings.HasSuffix(out, "\r"+strings.Repeat(" ", 59)+"\r") {
		t.Errorf("the bar's line was not cleared: %q", out)
	}
	buf.Reset()
	q := newProgress(&buf)
	q.update(10, 90)
	q.clear()
	if buf.Len() != 0 {
		t.Errorf("drew on a non-terminal: %q", buf.String())
	}
}
