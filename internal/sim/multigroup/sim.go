package multigroup

import (
	"container/heap"
	"errors"
	"fmt"
	"math/rand/v2"
)

// Config describes one simulated run. The zero value of a field takes
// its default (EnsureDefaults).
type Config struct {
	// Seed drives every random choice; a seed replays exactly.
	Seed uint64
	// Members is the number of cluster members.
	Members int
	// Groups is the number of data groups (the meta group is extra).
	Groups int
	// GroupSize is the number of voters of each group, meta included.
	GroupSize int
	// Stores is the number of named stores, each with KeysPerStore keys.
	Stores       int
	KeysPerStore int
	// Clients each run OpsPerClient operations, one at a time.
	Clients      int
	OpsPerClient int
	// Moves is how many store moves the mover makes, one after another.
	Moves int
	// DropRate is the probability that a message is lost.
	DropRate float64
	// Faults is the number of fault episodes (a member crash or a
	// partition), each healed after a while.
	Faults int
	// Bugs are deliberate protocol bugs, for the tests that show the
	// checker catches them. Production has none of these switches.
	Bugs Bugs
}

// Bugs are the protocol bugs the simulation can inject.
type Bugs struct {
	// AdoptBeforeCaughtUp: the mover proposes Adopt on the target as
	// soon as the source has committed its Fence, without waiting for
	// the target's copy of the store to reach the Fence's index, and
	// the target adopts whatever its copy holds.
	AdoptBeforeCaughtUp bool
	// NoSourceFence: the source never commits a Fence; it keeps
	// serving the store after the target adopted it.
	NoSourceFence bool
	// NoRevisionFloor: Adopt does not raise the target's revision to the
	// store's last revision, so fencing tokens issued by the target can
	// be lower than ones the source issued.
	NoRevisionFloor bool
	// NoLeaseMove: Adopt installs the store's locks but not their
	// leases, as if leases were the group's and not the store's.
	NoLeaseMove bool
}

// EnsureDefaults fills zero fields with defaults.
func (c *Config) EnsureDefaults() {
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	def(&c.Members, 5)
	def(&c.Groups, 3)
	def(&c.GroupSize, 3)
	def(&c.Stores, 3)
	def(&c.KeysPerStore, 2)
	def(&c.Clients, 5)
	def(&c.OpsPerClient, 80)
	def(&c.Moves, 6)
	def(&c.Faults, 4)
	if c.DropRate == 0 {
		c.DropRate = 0.02
	}
}

// Validate reports a configuration the simulation cannot run.
func (c *Config) Validate() error {
	switch {
	case c.GroupSize < 1 || c.GroupSize > c.Members:
		return fmt.Errorf("multigroup: GroupSize %d must be between 1 and Members (%d)", c.GroupSize, c.Members)
	case c.Groups < 2 && c.Moves > 0:
		return errors.New("multigroup: moves need at least 2 data groups")
	case c.Stores < 1 || c.KeysPerStore < 1 || c.Clients < 1:
		return errors.New("multigroup: Stores, KeysPerStore and Clients must be at least 1")
	case c.DropRate < 0 || c.DropRate >= 1:
		return fmt.Errorf("multigroup: DropRate %v must be in [0, 1)", c.DropRate)
	}
	return nil
}

// Result is what a run did, for the tests and for the seed's log line.
type Result struct {
	Seed      uint64
	Ops       int // client operations with a known outcome
	Unknown   int // writes whose outcome the client could not learn
	Redirects int // WrongGroup answers clients followed
	Moves     int // moves completed
	Faults    int // fault episodes injected
	Expiries  int // leases the leaders expired
	// WatchEvents and WatchMoves: events the store watchers received,
	// and times they followed their store to another group.
	WatchEvents, WatchMoves int
	EndTime                 int64
	Violations              []string
}

// Simulated time is in microseconds.
const (
	netMin          = 200   // one-way message latency, lower bound
	netMax          = 2000  // and upper bound
	fsync           = 250   // a raft append's fsync
	electionTimeout = 10000 // a leader that cannot reach a quorum is replaced after this
	attemptTimeout  = 30000 // a client attempt unanswered this long is given up
	opDeadline      = 400000
	tailEvery       = 1500 // a target's copy asks its source for more log this often
	tailBatch       = 4    // entries per catch-up message
	maxTime         = 120_000_000
	leaseTTL        = 60000 // every lock's lease
	lessorEvery     = 5000  // the leader's lease loop
)

type event struct {
	at  int64
	seq uint64
	fn  func()
}

type eventQueue []event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// world is one run: the members, the groups, the clients, the mover,
// the event queue and the recorded history.
type world struct {
	cfg    Config
	rng    *rand.Rand
	now    int64
	seq    uint64
	stamp  int64 // orders calls and returns for the history
	events eventQueue

	up  []bool          // by member id (index 0 unused: 0 is "outside")
	cut map[[2]int]bool // member pairs that cannot talk

	meta   *group
	groups []*group // groups[0] is meta
	stores []string
	keys   []string

	clients  []*client
	watchers []*watcher
	mover    *mover
	history  []record
	res      Result
}

func (w *world) after(d int64, fn func()) {
	w.seq++
	heap.Push(&w.events, event{at: w.now + d, seq: w.seq, fn: fn})
}

func (w *world) step() {
	e := heap.Pop(&w.events).(event)
	w.now = e.at
	e.fn()
}

func (w *world) tick() int64 {
	w.stamp++
	return w.stamp
}

func (w *world) violate(format string, args ...any) {
	msg := fmt.Sprintf("t=%dus: ", w.now) + fmt.Sprintf(format, args...)
	w.res.Violations = append(w.res.Violations, msg)
}

// reachable reports whether a message from a to b can arrive now. 0 is
// a client or the mover: outside the cluster, cut from nobody.
func (w *world) reachable(a, b int) bool {
	if (a != 0 && !w.up[a]) || (b != 0 && !w.up[b]) {
		return false
	}
	if a > b {
		a, b = b, a
	}
	return !w.cut[[2]int{a, b}]
}

// send delivers fn after a random latency, unless the message is lost:
// dropped at random, or either end down or cut off at sending or at
// arrival.
func (w *world) send(from, to int, fn func()) {
	if !w.reachable(from, to) || w.rng.Float64() < w.cfg.DropRate {
		return
	}
	w.after(netMin+w.rng.Int64N(netMax-netMin), func() {
		if w.reachable(from, to) {
			fn()
		}
	})
}

// Run runs one simulation and checks its invariants. The error, if
// any, names the seed and the first violation.
func Run(cfg Config) (Result, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	w := newWorld(cfg)
	w.start()
	for len(w.events) > 0 && len(w.res.Violations) == 0 && !w.done() && w.now < maxTime {
		w.step()
	}
	if len(w.res.Violations) == 0 && !w.done() {
		w.violate("the run stalled: %d clients still busy, mover done=%v", w.busyClients(), w.mover.done)
	}
	if len(w.res.Violations) == 0 {
		w.finalReads()
	}
	if len(w.res.Violations) == 0 {
		w.checkWatches()
	}
	if len(w.res.Violations) == 0 {
		w.checkHistory()
	}
	w.res.EndTime = w.now
	if len(w.res.Violations) > 0 {
		return w.res, fmt.Errorf("seed %d: %s", cfg.Seed, w.res.Violations[0])
	}
	return w.res, nil
}

func newWorld(cfg Config) *world {
	w := &world{
		cfg: cfg,
		rng: rand.New(rand.NewPCG(cfg.Seed, 0x6d756c746967726f)),
		up:  make([]bool, cfg.Members+1),
		cut: map[[2]int]bool{},
	}
	w.res.Seed = cfg.Seed
	for m := 1; m <= cfg.Members; m++ {
		w.up[m] = true
	}
	for i := 0; i <= cfg.Groups; i++ {
		g := newGroup(w, i, w.pickMembers())
		w.groups = append(w.groups, g)
	}
	w.meta = w.groups[0]
	for s := 0; s < cfg.Stores; s++ {
		w.stores = append(w.stores, fmt.Sprintf("s%d", s))
	}
	for k := 0; k < cfg.KeysPerStore; k++ {
		w.keys = append(w.keys, fmt.Sprintf("k%d", k))
	}
	// Every store starts on a data group, round robin, at epoch 1; the
	// placement table says so from the start.
	for i, s := range w.stores {
		g := w.groups[1+i%cfg.Groups]
		g.st.stores[s] = newStoreState(1)
		w.meta.st.placement[s] = placement{group: g.id, epoch: 1}
	}
	for i := 0; i < cfg.Clients; i++ {
		w.clients = append(w.clients, newClient(w, i+1))
	}
	for i, s := range w.stores {
		w.watchers = append(w.watchers, newWatcher(w, 1000+i, s))
	}
	w.mover = &mover{w: w}
	return w
}

// pickMembers chooses GroupSize distinct members at random.
func (w *world) pickMembers() []int {
	perm := w.rng.Perm(w.cfg.Members)
	out := make([]int, w.cfg.GroupSize)
	for i := range out {
		out[i] = perm[i] + 1
	}
	return out
}

func (w *world) start() {
	for _, g := range w.groups {
		g.elect()
		w.after(electionTimeout, g.watchdog)
		w.after(lessorEvery, g.lessor)
	}
	for _, c := range w.clients {
		w.after(w.rng.Int64N(1000), c.next)
	}
	for _, wt := range w.watchers {
		w.after(w.rng.Int64N(1000), wt.poll)
	}
	w.after(5000, w.mover.next)
	w.scheduleFaults()
}

func (w *world) done() bool {
	return w.busyClients() == 0 && w.mover.done
}

func (w *world) busyClients() int {
	n := 0
	for _, c := range w.clients {
		if c.left > 0 || c.cur != nil {
			n++
		}
	}
	return n
}

// scheduleFaults spreads fault episodes over the run: a member crashes
// (and restarts with its durable state), or the cluster is split in two.
func (w *world) scheduleFaults() {
	for i := 0; i < w.cfg.Faults; i++ {
		at := 20000 + w.rng.Int64N(400000)
		dur := 20000 + w.rng.Int64N(60000)
		crash := w.rng.IntN(2) == 0
		m := 1 + w.rng.IntN(w.cfg.Members)
		side := w.rng.Perm(w.cfg.Members)[:w.cfg.Members/2]
		w.after(at, func() {
			w.res.Faults++
			if crash {
				w.up[m] = false
				w.after(dur, func() { w.up[m] = true })
				return
			}
			in := map[int]bool{}
			for _, x := range side {
				in[x+1] = true
			}
			var pairs [][2]int
			for a := 1; a <= w.cfg.Members; a++ {
				for b := a + 1; b <= w.cfg.Members; b++ {
					if in[a] != in[b] && !w.cut[[2]int{a, b}] {
						w.cut[[2]int{a, b}] = true
						pairs = append(pairs, [2]int{a, b})
					}
				}
			}
			w.after(dur, func() {
				for _, p := range pairs {
					delete(w.cut, p)
				}
			})
		})
	}
}

// expired records an applied lease expiry in the history: the moment
// the lock stopped being held, for the linearizability check and for
// the check that no lease expired before its holder's last renewal
// allowed.
func (w *world) expired(c command) {
	w.res.Expiries++
	t := w.tick()
	w.history = append(w.history, record{cmd: c, call: t, ret: t, callAt: c.at})
}

// servingGroups returns the groups whose applied state serves store s.
func (w *world) servingGroups(s string) []int {
	var out []int
	for _, g := range w.groups[1:] {
		if ss := g.st.stores[s]; ss != nil && ss.serving {
			out = append(out, g.id)
		}
	}
	return out
}

// checkOneServer is the invariant that no two groups serve a store at
// once; it runs after every applied entry.
func (w *world) checkOneServer(s string) {
	if gs := w.servingGroups(s); len(gs) > 1 {
		w.violate("store %s is served by groups %v at once", s, gs)
	}
}
