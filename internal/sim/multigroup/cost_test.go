package multigroup

import (
	"testing"
	"time"
)

// calibrated is the cost model docs/design/multi-group.md states: 240
// µs of server CPU per put across a 3-member cluster (BENCHMARKS.md,
// "put 64, server CPU-ms/1k"), split by BENCHMARKS.md's "the leader's
// CPU per op is 2.3x a follower's": 128 µs on the leader and 56 µs on
// each follower; two cores per member.
var calibrated = Cost{Leader: 128 * time.Microsecond, Follower: 56 * time.Microsecond, Cores: 2, Replicas: 3}

// TestProjection prints the table the design doc quotes (go test -v
// -run TestProjection) and checks the model's shape: one group is bound
// by its leader's CPU whatever the member count; on three members more
// groups only spread leadership (at most 1.6x); throughput grows with
// members once there are enough groups to spread over them.
func TestProjection(t *testing.T) {
	for _, n := range []int{3, 6, 9, 12} {
		for _, g := range []int{1, 2, 4, 8} {
			p := calibrated.Project(n, g)
			t.Logf("members %2d groups %d: %7.0f puts/s, busiest member %.2f of the CPU, at most %d groups per member",
				n, g, p.PutsPerSec, p.BusiestShare, p.GroupsPerMember)
		}
	}
	one3, one12 := calibrated.Project(3, 1), calibrated.Project(12, 1)
	if one3.PutsPerSec != one12.PutsPerSec {
		t.Errorf("one group: %v puts/s on 3 members but %v on 12; members should not matter", one3.PutsPerSec, one12.PutsPerSec)
	}
	// Three groups on three members: each member leads one and follows
	// two, (128+2*56)/3 = 80 µs a put instead of the leader's 128.
	if r := calibrated.Project(3, 3).PutsPerSec / one3.PutsPerSec; r < 1.59 || r > 1.61 {
		t.Errorf("3 groups on 3 members: %.2fx one group, want 1.6x (leadership spread only)", r)
	}
	if r := calibrated.Project(12, 8).PutsPerSec / calibrated.Project(6, 8).PutsPerSec; r < 1.5 {
		t.Errorf("8 groups: 12 members give only %.2fx of 6", r)
	}
}
