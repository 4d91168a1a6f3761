package server

import (
	"math"
	"strings"
	"testing"
)

func TestConfigLeaseMaxClockDrift(t *testing.T) {
	var cfg Config
	cfg.EnsureDefaults()
	if cfg.LeaseMaxClockDrift != DefaultLeaseMaxClockDrift || cfg.Validate() != nil {
		t.Fatalf("default drift %v (%v), want %v and valid", cfg.LeaseMaxClockDrift, cfg.Validate(), DefaultLeaseMaxClockDrift)
	}
	for _, d := range []float64{-1, 0.2, 0.4999} {
		cfg.LeaseMaxClockDrift = d
		if err := cfg.Validate(); err != nil {
			t.Errorf("drift %v refused: %v", d, err)
		}
	}
	for _, d := range []float64{0.5, 2, math.NaN(), math.Inf(1)} {
		cfg.LeaseMaxClockDrift = d
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), "must be below 0.5") {
			t.Errorf("drift %v: err = %v, want one naming the 0.5 limit", d, err)
		}
	}
}
