package multigroup

import "time"

// Cost is a cost model of a put, per member, calibrated in
// docs/design/multi-group.md ("The numbers") from BENCHMARKS.md.
type Cost struct {
	// Leader and Follower are the CPU one put costs the group's leader
	// and each follower.
	Leader, Follower time.Duration
	// Cores is the CPU each member has to itself.
	Cores float64
	// Replicas is each group's voter count.
	Replicas int
}

// Projection is the model's answer for one (members, groups) point.
type Projection struct {
	Members, Groups int
	// PutsPerSec is the saturated write throughput, every group equally
	// loaded: the busiest member's CPU is the limit.
	PutsPerSec float64
	// BusiestShare is the fraction of all puts' CPU the busiest member
	// spends (1/Members when perfectly spread).
	BusiestShare float64
	// GroupsPerMember is the most groups one member hosts: the fsyncs a
	// member makes per raft round if every group kept its own log.
	GroupsPerMember int
}

// Project places groups' replicas round robin over the members (group
// g on members g*Replicas .. g*Replicas+Replicas-1, modulo Members; its
// leader on the (g mod Replicas)th of them), the placement a balancer of
// replicas and leaderships converges to, and
// returns the throughput at which the busiest member's CPU is full.
func (c Cost) Project(members, groups int) Projection {
	cpu := make([]float64, members) // seconds of CPU per put, all groups equally loaded
	hosted := make([]int, members)
	perGroup := 1 / float64(groups)
	r := min(c.Replicas, members)
	for g := 0; g < groups; g++ {
		for i := 0; i < r; i++ {
			m := (g*c.Replicas + i) % members
			hosted[m]++
			if i == g%r {
				cpu[m] += perGroup * c.Leader.Seconds()
			} else {
				cpu[m] += perGroup * c.Follower.Seconds()
			}
		}
	}
	busiest, most := 0.0, 0
	for m := range cpu {
		busiest = max(busiest, cpu[m])
		most = max(most, hosted[m])
	}
	total := c.Leader.Seconds() + float64(r-1)*c.Follower.Seconds()
	return Projection{Members: members, Groups: groups, PutsPerSec: c.Cores / busiest,
		BusiestShare: busiest / total, GroupsPerMember: most}
}
