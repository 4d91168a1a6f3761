package recipe

// CanaryDecision is what the canary rule says to do at a rollout stage.
type CanaryDecision int

const (
	// CanaryWait: too few canary requests to judge; stay at this stage.
	CanaryWait CanaryDecision = iota
	// CanaryProceed: the canary is no worse than the rule allows; go on to
	// the next stage.
	CanaryProceed
	// CanaryRollback: the canary fails too often; roll the flag back to 0%.
	CanaryRollback
)

func (d CanaryDecision) String() string {
	switch d {
	case CanaryWait:
		return "wait"
	case CanaryProceed:
		return "proceed"
	case CanaryRollback:
		return "rollback"
	}
	return "unknown"
}

// VariantStats are the requests and errors one variant served.
type VariantStats struct {
	Requests, Errors int64
}

// CanaryThresholds configure the canary rule; a zero field takes its
// default.
type CanaryThresholds struct {
	// MinRequests canary requests are needed before deciding (default 200).
	MinRequests int64
	// Ratio: the canary's error rate must be at least Ratio times the
	// baseline's to abort (default 2).
	Ratio float64
	// MinPointsAbove: and at least this many percentage points above it
	// (default 0.5), so a baseline with no or very few errors does not
	// abort a canary on one error.
	MinPointsAbove float64
}

// Default canary thresholds.
const (
	DefaultCanaryMinRequests    = 200
	DefaultCanaryRatio          = 2.0
	DefaultCanaryMinPointsAbove = 0.5
)

func (t CanaryThresholds) withDefaults() CanaryThresholds {
	if t.MinRequests <= 0 {
		t.MinRequests = DefaultCanaryMinRequests
	}
	if t.Ratio <= 0 {
		t.Ratio = DefaultCanaryRatio
	}
	if t.MinPointsAbove <= 0 {
		t.MinPointsAbove = DefaultCanaryMinPointsAbove
	}
	return t
}

// DecideCanary is the canary rule, a pure function: fewer than
// MinRequests canary requests → CanaryWait; the canary's error rate at
// least Ratio × the baseline's AND at least MinPointsAbove percentage
// points above it → CanaryRollback; else CanaryProceed. A baseline with
// no requests or no errors has rate 0 (no division by zero): the
// percentage-point margin alone then decides.
func DecideCanary(baseline, canary VariantStats, t CanaryThresholds) CanaryDecision {
	t = t.withDefaults()
	if canary.Requests < t.MinRequests {
		return CanaryWait
	}
	// Compared cross-multiplied, so the boundaries (exactly Ratio times,
	// exactly MinPointsAbove points) are not lost to rounding:
	// c >= Ratio·b  ⇔  ce·br >= Ratio·be·cr, and
	// (c-b)·100 >= m  ⇔  100·(ce·br - be·cr) >= m·cr·br,
	// with br taken as 1 (and be as 0) for a baseline without requests.
	ce, cr := float64(canary.Errors), float64(canary.Requests)
	be, br := float64(baseline.Errors), float64(baseline.Requests)
	if baseline.Requests <= 0 {
		be, br = 0, 1
	}
	if ce*br >= t.Ratio*be*cr && 100*(ce*br-be*cr) >= t.MinPointsAbove*cr*br {
		return CanaryRollback
	}
	return CanaryProceed
}
