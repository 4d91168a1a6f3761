package cli

import (
	"bytes"
	"strings"
	"testing"
)

func TestServeLeaseMaxClockDrift(t *testing.T) {
	for flag, want := range map[float64]float64{0: -1, 0.01: 0.01, 0.2: 0.2} {
		if got, err := leaseMaxClockDrift(flag); err != nil || got != want {
			t.Errorf("--lease-max-clock-drift %v: config %v (%v), want %v", flag, got, err, want)
		}
	}
	for _, arg := range []string{"0.5", "-0.01", "NaN"} {
		var stdout, stderr bytes.Buffer
		code := Run([]string{"serve", "--data-dir", t.TempDir(), "--lease-max-clock-drift", arg}, nil, &stdout, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), "out of range [0, 0.5)") {
			t.Errorf("--lease-max-clock-drift %s: exit %d, stderr %q; want a usage error naming the range", arg, code, stderr.String())
		}
	}
}
