package chaos

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/storage"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
)

// inprocKinds are the faults an in-process cluster takes: node stops
// (a crash without fsync loss: the process stays, the node's Pebble is
// closed and reopened), partitions through the transport's Faults, a
// membership change under load, a lease clock running fast or slow, and
// a member's disk filling up (ENOSPC, then too little free space).
var inprocKinds = []string{
	"kill-leader", "kill-follower",
	"isolate-leader", "isolate-follower",
	"oneway-from-leader", "oneway-to-leader",
	"drop", "delay", "membership", "clock-drift", "disk-full",
}

// inprocLeaseDrift is the LeaseMaxClockDrift of the in-process chaos
// cluster, and so the bound of the rates the clock-drift fault sets.
// Larger than the 1% default, to make the fault count for something.
const inprocLeaseDrift = 0.05

// newSkewedCluster starts a 3-node cluster in which every node (also
// those the membership fault adds) measures leases with its own
// SkewClock; it stays with the node across Stop and Start.
func newSkewedCluster(t *testing.T, base server.Config) *servertest.Cluster {
	return servertest.NewClusterEach(t, 3, base, func(nd *servertest.Node) {
		nd.Cfg.LeaseClock = NewSkewClock()
		// The disk-full fault works through this filesystem: it reports
		// the free space the fault sets and fails writes with ENOSPC.
		fs := storage.NewFaultFS(nil)
		fs.Avail.Store(plentyOfSpace)
		nd.Cfg.FS = fs
		nd.Cfg.SpaceCheckInterval = 50 * time.Millisecond
		nd.Cfg.SpaceReserveBytes = 64 << 20
		nd.Cfg.BallastBytes = 4 << 20
	})
}

const plentyOfSpace = 1 << 40

func faultFSOf(nd *servertest.Node) *storage.FaultFS {
	fs, _ := nd.Cfg.FS.(*storage.FaultFS)
	return fs
}

func clockOf(nd *servertest.Node) *SkewClock {
	c, _ := nd.Cfg.LeaseClock.(*SkewClock)
	return c
}

// inprocNemesis injects faults into a servertest.Cluster. Only the test
// goroutine calls it (the harness fails the test from there).
type inprocNemesis struct {
	c      *servertest.Cluster
	voters []*servertest.Node // the original members; endpoints for clients
	down   map[*servertest.Node]bool
	kinds  []string
	joined int
	// drift bounds the clock-drift fault's rates to 1±drift; it must be
	// the LeaseMaxClockDrift the cluster runs with.
	drift float64
	// logf reports how a membership fault's learner fared.
	logf func(string, ...any)
	// overdrive, if set, makes the clock-drift fault set the leader's
	// rate to overdrive..overdrive+0.5 instead: beyond any bound, for the
	// broken-build run whose servers assume no drift.
	overdrive float64
}

func newInprocNemesis(c *servertest.Cluster, kinds []string) *inprocNemesis {
	return &inprocNemesis{c: c, voters: append([]*servertest.Node(nil), c.Nodes...), down: map[*servertest.Node]bool{}, kinds: kinds, drift: inprocLeaseDrift}
}

func (n *inprocNemesis) Kinds() []string { return n.kinds }

func (n *inprocNemesis) Endpoints() []string {
	var eps []string
	for _, nd := range n.voters {
		if nd.Running() {
			eps = append(eps, nd.Cfg.ClientAddr)
		}
	}
	return eps
}

func (n *inprocNemesis) follower(target int) (*servertest.Node, error) {
	var fs []*servertest.Node
	for _, nd := range n.c.Followers() {
		for _, v := range n.voters {
			if v == nd {
				fs = append(fs, nd)
			}
		}
	}
	if len(fs) == 0 {
		return nil, errors.New("no running follower")
	}
	return fs[target%len(fs)], nil
}

func (n *inprocNemesis) Inject(ctx context.Context, f Fault) (func() error, error) {
	c := n.c
	l := c.Leader()
	if l == nil {
		return nil, errors.New("no leader")
	}
	heal := func() error { c.Heal(); return nil }
	switch f.Kind {
	case "kill-leader", "kill-follower":
		nd := l
		if f.Kind == "kill-follower" {
			var err error
			if nd, err = n.follower(f.Target); err != nil {
				return nil, err
			}
		}
		c.Stop(nd)
		n.down[nd] = true
		return func() error { c.Start(nd); delete(n.down, nd); return nil }, nil
	case "isolate-leader":
		c.Isolate(l)
	case "isolate-follower":
		fl, err := n.follower(f.Target)
		if err != nil {
			return nil, err
		}
		c.Isolate(fl)
	case "oneway-from-leader", "oneway-to-leader":
		fl, err := n.follower(f.Target)
		if err != nil {
			return nil, err
		}
		if f.Kind == "oneway-from-leader" {
			c.Faults.Cut(l.ID(), fl.ID())
		} else {
			c.Faults.Cut(fl.ID(), l.ID())
		}
	case "drop", "delay":
		for _, a := range c.Nodes {
			for _, b := range c.Nodes {
				if a == b {
					continue
				}
				if f.Kind == "drop" {
					c.Faults.SetDropRate(a.ID(), b.ID(), 0.2+float64(f.Target%4)/10)
				} else {
					c.Faults.SetDelay(a.ID(), b.ID(), time.Duration(10+f.Target%60)*time.Millisecond)
				}
			}
		}
	case "membership":
		return n.membership(ctx, l)
	case "clock-drift":
		return n.clockDrift(l, f)
	case "disk-full":
		return n.diskFull(l, f)
	default:
		return nil, fmt.Errorf("unknown fault kind %q", f.Kind)
	}
	return heal, nil
}

// clockDrift makes one node's lease clock run fast or slow until the
// heal. Two times in three it is the leader's, and then fast three times
// in four: the leader decides expiries, and a fast clock is the direction
// that would expire leases early. The rate is within 1±drift, at the edge
// one time in four.
func (n *inprocNemesis) clockDrift(l *servertest.Node, f Fault) (func() error, error) {
	t := f.Target
	nd, fast := l, t/3%4 != 0
	if t%3 == 2 {
		fl, err := n.follower(t / 3)
		if err != nil {
			return nil, err
		}
		nd, fast = fl, t/3%2 == 0
	}
	x := n.drift * float64(1+t/12%4) / 4
	if !fast {
		x = -x
	}
	rate := 1 + x
	if n.overdrive > 0 {
		nd, rate = l, n.overdrive+float64(t%6)/10
	}
	clk := clockOf(nd)
	if clk == nil {
		return nil, fmt.Errorf("%s has no SkewClock", nd.Name)
	}
	clk.SetRate(rate)
	return func() error { clk.SetRate(1); return nil }, nil
}

// diskFull fills one member's disk (the leader's one time in two): its
// next write meets ENOSPC (the ballast absorbs it) and it measures 8 MiB
// free, below the 64 MiB reserve, until the heal. The cluster refuses
// writes that add data with NoSpace meanwhile; nothing acknowledged may
// be lost and writes must resume after.
func (n *inprocNemesis) diskFull(l *servertest.Node, f Fault) (func() error, error) {
	nd := l
	if f.Target%2 == 1 {
		fl, err := n.follower(f.Target / 2)
		if err != nil {
			return nil, err
		}
		nd = fl
	}
	fs := faultFSOf(nd)
	if fs == nil {
		return nil, fmt.Errorf("%s has no FaultFS", nd.Name)
	}
	fs.FailNext.Store(1)
	fs.Avail.Store(8 << 20)
	return func() error {
		fs.FailNext.Store(0)
		fs.Avail.Store(plentyOfSpace)
		return nil
	}, nil
}

// membership adds a learner while the workload runs; the heal promotes
// it to voter once it has caught up, then removes it again, so the
// cluster goes 3 -> 3+learner -> 4 voters -> 3.
func (n *inprocNemesis) membership(ctx context.Context, l *servertest.Node) (func() error, error) {
	n.joined++
	name := fmt.Sprintf("m%d", n.joined)
	var join []string
	for _, v := range n.voters {
		if v.Running() {
			join = append(join, v.Cfg.ClientAddr)
		}
	}
	nd := n.c.Add(name, join)
	return func() error {
		defer n.c.Stop(nd)
		healStart := time.Now()
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		cl, err := client.New(cctx, client.Config{Endpoints: join, AutoSyncInterval: -1})
		if err != nil {
			return err
		}
		defer cl.Close()
		cc := dkvpb.NewClusterClient(cl.Conn())
		// Promotion is refused (Conflict) until the learner catches up.
		for {
			_, err = cc.MemberPromote(cctx, &dkvpb.MemberPromoteRequest{Name: name})
			if err == nil || cctx.Err() != nil {
				break
			}
			if c := dkverr.CodeOf(err); c != dkverr.Conflict && c != dkverr.Unavailable {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		promoted := err == nil
		if n.logf != nil {
			outcome := "promoted"
			if !promoted {
				outcome = "not promoted (still catching up)"
			}
			n.logf("membership: learner %s %s %.1fs after its heal began", name, outcome, time.Since(healStart).Seconds())
		}
		// The removal gets its own deadline: a learner that could not
		// catch up during the faults (promotion timed out) must still be
		// removed, and the promote loop may have used up cctx.
		rctx, rcancel := context.WithTimeout(ctx, 15*time.Second)
		defer rcancel()
		// Refused with Conflict while fewer than a quorum of the other
		// voters are recently active (right after a leader change, or
		// while a member is still catching up from the faults): a state
		// that passes, so it is asked again, as an operator would.
		for {
			_, err = cc.MemberRemove(rctx, &dkvpb.MemberRemoveRequest{Name: name})
			if c := dkverr.CodeOf(err); err == nil || rctx.Err() != nil || (c != dkverr.Unavailable && c != dkverr.Conflict) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			return fmt.Errorf("removing %s (promoted: %v): %w", name, promoted, err)
		}
		return nil
	}, nil
}

func (n *inprocNemesis) Recover(ctx context.Context) error {
	n.c.Heal()
	for _, nd := range n.c.Nodes {
		if clk := clockOf(nd); clk != nil {
			clk.SetRate(1)
		}
		if fs := faultFSOf(nd); fs != nil {
			fs.FailNext.Store(0)
			fs.Avail.Store(plentyOfSpace)
		}
	}
	for nd := range n.down {
		n.c.Start(nd)
		delete(n.down, nd)
	}
	n.c.WaitLeader()
	n.c.WaitConverged()
	return nil
}

// pinnedClients makes per clients per node, each talking to that node
// only, so reads on a partitioned member stay on it.
func pinnedClients(ctx context.Context, endpoints []string, per int) ([]client.KV, func(), error) {
	var kvs []client.KV
	var cls []*client.Client
	closeAll := func() {
		for _, c := range cls {
			c.Close()
		}
	}
	for i := 0; i < per*len(endpoints); i++ {
		c, err := client.New(ctx, client.Config{
			Endpoints:        []string{endpoints[i%len(endpoints)]},
			DialTimeout:      -1,
			AutoSyncInterval: -1,
			MaxRetries:       3,
		})
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		cls = append(cls, c)
		kvs = append(kvs, c)
	}
	return kvs, closeAll, nil
}
