package chaos

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/concurrency"
	"github.com/dkv-io/dkv/client/recipe"
)

// SemaphoreStream is the Recorder stream of SemaphoreWorkload.
const SemaphoreStream = "semaphore"

// SemHolding is what one holder logged of one permit: the revisions of
// its first and last write fenced by the permit that the store accepted.
type SemHolding struct {
	Worker      int
	Slot        int
	Token       int64
	First, Last int64
}

// SemaphoreWorkload has workers (one session each) contend for N permits,
// make writes fenced by their permit while they hold it, and sometimes
// pause past their session's TTL before a last fenced write, which the
// store must refuse.
type SemaphoreWorkload struct {
	Clients   []*client.Client
	Sem       string
	N         int
	TTL       time.Duration
	OpTimeout time.Duration
}

// Name implements Workload.
func (w *SemaphoreWorkload) Name() string { return "semaphore" }

func (w *SemaphoreWorkload) defaults() {
	if w.Sem == "" {
		w.Sem = "chaos/sem"
	}
	if w.N == 0 {
		w.N = 2
	}
	if w.TTL == 0 {
		w.TTL = 2 * time.Second
	}
	if w.OpTimeout == 0 {
		w.OpTimeout = 2 * time.Second
	}
}

// Run implements Workload: two workers per client.
func (w *SemaphoreWorkload) Run(ctx context.Context, rec *Recorder, stats *Stats) {
	w.defaults()
	var wg sync.WaitGroup
	for i := range 2 * len(w.Clients) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.worker(ctx, i, w.Clients[i%len(w.Clients)], rec, stats)
		}()
	}
	wg.Wait()
}

func (w *SemaphoreWorkload) worker(ctx context.Context, id int, c *client.Client, rec *Recorder, stats *Stats) {
	for round := 0; ctx.Err() == nil; round++ {
		sctx, cancel := context.WithTimeout(ctx, w.OpTimeout)
		s, err := concurrency.NewSession(sctx, c, concurrency.WithTTL(w.TTL))
		cancel()
		if err != nil {
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		w.hold(ctx, id, round, s, rec, stats)
		s.Close()
	}
}

func (w *SemaphoreWorkload) hold(ctx context.Context, id, round int, s *concurrency.Session, rec *Recorder, stats *Stats) {
	sem, err := recipe.NewSemaphore(s, w.Sem, w.N)
	if err != nil {
		return
	}
	actx, cancel := context.WithTimeout(ctx, 4*w.TTL)
	p, err := sem.Acquire(actx)
	cancel()
	if err != nil {
		sleepCtx(ctx, 50*time.Millisecond)
		return
	}
	h := SemHolding{Worker: id, Slot: p.Slot, Token: p.Token()}
	write := func() string {
		octx, cancel := context.WithTimeout(ctx, w.OpTimeout)
		pr, err := s.Client().Put(octx, fmt.Sprintf("%s-work/%d", w.Sem, id), []byte(fmt.Sprint(round)), client.WithLock(p.Handle))
		cancel()
		o := outcome(err)
		stats.Op(o)
		if err == nil {
			if h.First == 0 {
				h.First = pr.Revision
			}
			h.Last = pr.Revision
		}
		return o
	}
	for range 3 {
		write()
	}
	if round%3 == 1 {
		// A paused holder: its session ends (Orphan stops the keep-alive)
		// and its lease expires; the late fenced write must be refused
		// (if the expiry has not been applied yet, the permit is still
		// held and the write counts in the holding).
		s.Orphan()
		if !sleepCtx(ctx, w.TTL+1500*time.Millisecond) {
			return
		}
		if write() == "locked" {
			stats.Check("semaphore-late-write-refused", 1)
		}
	} else {
		octx, cancel := context.WithTimeout(ctx, w.OpTimeout)
		_ = p.Release(octx)
		cancel()
	}
	if h.First != 0 {
		rec.Append(SemaphoreStream, h)
	}
}

// Final implements Workload.
func (w *SemaphoreWorkload) Final(ctx context.Context, rec *Recorder, stats *Stats) {}

// SemaphoreBound checks SemaphoreWorkload's holder logs: at no revision
// were more than N permits in use (a permit is in use from its first to
// its last accepted fenced write), and per slot the holdings are ordered
// by token without overlap.
type SemaphoreBound struct{ N int }

// Name implements Checker.
func (SemaphoreBound) Name() string { return "semaphore-bound" }

// Check implements Checker.
func (c SemaphoreBound) Check(ctx context.Context, r *Run) []Anomaly {
	n := c.N
	if n == 0 {
		w := &SemaphoreWorkload{}
		w.defaults()
		n = w.N
	}
	var hs []SemHolding
	for _, ev := range r.History.Stream(SemaphoreStream) {
		hs = append(hs, ev.(SemHolding))
	}
	r.Stats.Check("semaphore holdings", len(hs))
	if msg := SemaphoreViolation(hs, n); msg != "" {
		return []Anomaly{{Checker: c.Name(), Msg: msg}}
	}
	return nil
}

// SemaphoreViolation returns "" if the holdings respect the bound n, or
// else what broke it.
func SemaphoreViolation(hs []SemHolding, n int) string {
	type edge struct {
		rev   int64
		delta int
	}
	var edges []edge
	for _, h := range hs {
		edges = append(edges, edge{h.First, +1}, edge{h.Last + 1, -1})
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].rev != edges[j].rev {
			return edges[i].rev < edges[j].rev
		}
		return edges[i].delta < edges[j].delta
	})
	cur := 0
	for _, e := range edges {
		cur += e.delta
		if cur > n {
			return fmt.Sprintf("%d permits in use at revision %d, more than %d", cur, e.rev, n)
		}
	}
	bySlot := map[int][]SemHolding{}
	for _, h := range hs {
		bySlot[h.Slot] = append(bySlot[h.Slot], h)
	}
	slots := make([]int, 0, len(bySlot))
	for s := range bySlot {
		slots = append(slots, s)
	}
	sort.Ints(slots)
	for _, s := range slots {
		l := bySlot[s]
		sort.Slice(l, func(i, j int) bool { return l[i].First < l[j].First })
		for i := 1; i < len(l); i++ {
			if l[i].Token <= l[i-1].Token || l[i].First <= l[i-1].Last {
				return fmt.Sprintf("slot %d: holding %+v overlaps or precedes %+v", s, l[i], l[i-1])
			}
		}
	}
	return ""
}
