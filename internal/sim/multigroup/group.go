package multigroup

import (
	"cmp"
	"maps"
	"slices"
)

// status is a reply's outcome.
type status int

const (
	stOK         status = iota
	stLocked            // the key is locked by another handle, or the handle is not the holder's
	stWrongGroup        // this group fenced the store off: epoch and group say where it went
	stNotHere           // this group does not (yet) serve the store; ask the placement table
	stNotLeader         // this member does not lead the group; leader is a hint
)

func (s status) String() string {
	return [...]string{"OK", "Locked", "WrongGroup", "NotHere", "NotLeader"}[s]
}

type cmdKind int

const (
	cmdPut     cmdKind = iota // token 0: a plain put; otherwise fenced by the lock token
	cmdAcquire                // try-lock: a token, or Locked; the lock's lease is the token
	cmdRelease
	cmdRenew  // a keep-alive of the lock's lease
	cmdExpire // proposed by the leader when the lease's deadline passed
	cmdGet    // never in a log: served by a ReadIndex round
	cmdWatch  // never in a log: the store's events after a revision
	cmdFence
	cmdAdopt
	cmdDrop
	cmdLookup // meta, read
	cmdBeginMove
	cmdCommitMove
)

// command is a request to a group. Client commands carry the client's
// id and sequence number, so a retry is answered from the store's kept
// reply instead of applying twice (DKV's client sessions).
type command struct {
	kind       cmdKind
	store, key string
	val        string
	token      int64
	client     int
	seq        int
	epoch      int // fence, adopt, begin/commit move: the epoch the store moves to
	group      int // fence, begin/commit move: the target; adopt: the source
	index      int // adopt: the index of the source's fence
	// at is the time the proposing leader stamped on the command: a
	// lease's deadline is counted from it, and an expiry carries it.
	at int64
	// remaining is, on Adopt, each lease's remaining TTL the fence
	// recorded (lease id -> microseconds).
	remaining map[int64]int64
}

type reply struct {
	status status
	val    string
	token  int64
	index  int // fence: the index of the fence entry
	epoch  int // WrongGroup and lookup: the placement epoch
	group  int // WrongGroup and lookup: the group
	leader int // NotLeader: a hint (0: none known)
	moving bool
	// remaining is, on a fence, each lease's remaining TTL.
	remaining map[int64]int64
	events    []wevent // a watch's answer
}

// wevent is a watch event: a put of key at rev.
type wevent struct {
	rev      int64
	key, val string
}

// placement is one row of the meta group's placement table.
type placement struct {
	group  int
	epoch  int
	moving bool
	to     int
}

// storeState is one store's replicated state inside a group. It moves
// whole: data, lock table, revision high-water mark and the kept replies
// of client sessions.
type storeState struct {
	serving bool
	epoch   int
	movedTo int // after the fence: where the store went
	fenced  int // after the fence: the index of the fence entry
	lastRev int64
	kv      map[string]string
	lock    map[string]int64
	// leases maps a lock's token (its lease's id) to the lease's
	// deadline; remaining is what the fence recorded.
	leases    map[int64]int64
	remaining map[int64]int64
	replies   map[[2]int]reply // (client, seq) -> the reply it got
	// events is the store's change log, every put with its revision; it
	// moves with the store, so a watch resumes on the target.
	events []wevent
}

func newStoreState(epoch int) *storeState {
	return &storeState{serving: true, epoch: epoch, kv: map[string]string{}, lock: map[string]int64{},
		leases: map[int64]int64{}, replies: map[[2]int]reply{}}
}

func (s *storeState) clone() *storeState {
	c := *s
	c.kv = maps.Clone(s.kv)
	c.lock = maps.Clone(s.lock)
	c.leases = maps.Clone(s.leases)
	c.remaining = maps.Clone(s.remaining)
	c.replies = maps.Clone(s.replies)
	c.events = slices.Clone(s.events)
	return &c
}

// applyStore applies a client write to a store at revision rev (the
// group's next revision). It is pure given (s, c, rev): a target's copy
// replays the source's entries with the revisions they took there.
func applyStore(s *storeState, c command, rev int64) (reply, bool) {
	session := c.client != 0 // the leader's own commands (expiries) are in no session
	if r, ok := s.replies[[2]int{c.client, c.seq}]; ok && session {
		return r, false
	}
	var r reply
	wrote := false
	held := s.lock[c.key]
	switch c.kind {
	case cmdPut:
		if held != c.token {
			r.status = stLocked
			break
		}
		s.kv[c.key] = c.val
		s.events = append(s.events, wevent{rev: rev, key: c.key, val: c.val})
		wrote = true
	case cmdAcquire:
		if held != 0 {
			r.status = stLocked
			break
		}
		s.lock[c.key] = rev
		s.leases[rev] = c.at + leaseTTL
		r.token = rev
		wrote = true
	case cmdRelease:
		if held == 0 || held != c.token {
			r.status = stLocked
			break
		}
		delete(s.lock, c.key)
		delete(s.leases, held)
		wrote = true
	case cmdRenew:
		if _, ok := s.leases[c.token]; !ok || held != c.token {
			r.status = stLocked
			break
		}
		s.leases[c.token] = c.at + leaseTTL
		wrote = true
	case cmdExpire:
		if d, ok := s.leases[c.token]; !ok || held != c.token || c.at < d {
			r.status = stLocked // renewed, released or already expired since it was proposed
			break
		}
		delete(s.lock, c.key)
		delete(s.leases, c.token)
		wrote = true
	}
	if wrote {
		s.lastRev = rev
	}
	if session {
		s.replies[[2]int{c.client, c.seq}] = r
	}
	return r, wrote
}

// gstate is a group's applied state: its revision counter, its stores,
// and (meta only) the placement table.
type gstate struct {
	rev       int64
	stores    map[string]*storeState
	placement map[string]placement
}

// entry is one committed log entry; rev is the revision its write took
// (0 if it wrote nothing), for the copies that replay it.
type entry struct {
	cmd     command
	rev     int64
	applied bool // the store applied it (not refused as moved or absent)
}

type pend struct {
	cmd  command
	done func(reply)
}

// copyState is a target group's copy of a store it is about to adopt,
// kept by its members as learners of the source group: a snapshot, then
// the source's log tail.
type copyState struct {
	store    string
	from     *group
	ss       *storeState // nil until the snapshot arrived
	index    int         // source log index the copy reflects
	inflight int         // the generation of the message in flight, 0: none
	gen      int
}

// group models one raft group: a committed log, a leader that commits
// only while it reaches a quorum of its voters, and the applied state
// (which every voter reaches by applying the same log).
type group struct {
	w       *world
	id      int
	members []int
	leader  int
	term    int
	log     []entry
	pending []pend
	flushAt bool
	st      *gstate
	copies  map[string]*copyState
}

func newGroup(w *world, id int, members []int) *group {
	return &group{w: w, id: id, members: members,
		st:     &gstate{stores: map[string]*storeState{}, placement: map[string]placement{}},
		copies: map[string]*copyState{}}
}

func (g *group) isMember(m int) bool {
	for _, x := range g.members {
		if x == m {
			return true
		}
	}
	return false
}

func (g *group) quorum(from int) bool {
	if from == 0 || !g.w.up[from] {
		return false
	}
	n := 0
	for _, m := range g.members {
		if m == from || g.w.reachable(from, m) {
			n++
		}
	}
	return n > len(g.members)/2
}

// watchdog replaces a leader that is down or cut off from its quorum
// (raft's CheckQuorum and election timeout).
func (g *group) watchdog() {
	if !g.quorum(g.leader) {
		g.elect()
	}
	g.w.after(electionTimeout/2, g.watchdog)
}

// elect picks a new leader among the members that reach a quorum. The
// old leader's uncommitted entries: the new leader holds some prefix of
// them, which it commits; their proposers never hear back.
func (g *group) elect() {
	var cands []int
	for _, m := range g.members {
		if g.quorum(m) {
			cands = append(cands, m)
		}
	}
	if len(cands) == 0 {
		g.leader = 0
		return
	}
	g.leader = cands[g.w.rng.IntN(len(cands))]
	g.term++
	p := g.pending
	g.pending = nil
	g.flushAt = false
	n := g.w.rng.IntN(len(p) + 1)
	for _, x := range p[:n] {
		g.commit(x.cmd)
	}
}

// handle is a request arriving at member m. respond sends the reply
// back from m.
func (g *group) handle(m int, c command, respond func(reply)) {
	if m != g.leader {
		respond(reply{status: stNotLeader, leader: g.leader})
		return
	}
	switch c.kind {
	case cmdGet, cmdLookup, cmdWatch:
		g.readIndex(m, c, respond)
		return
	}
	if c.kind <= cmdExpire {
		if r, ok := g.refuse(c.store); ok {
			respond(r) // a fast refusal; apply checks again
			return
		}
	}
	c.at = g.w.now // the leader stamps its time on what it proposes
	g.pending = append(g.pending, pend{cmd: c, done: respond})
	if !g.flushAt {
		g.flushAt = true
		term := g.term
		g.w.after(fsync+2*netMax, func() { g.flush(term) })
	}
}

// flush commits every pending proposal if the leader of term still
// reaches a quorum; otherwise it tries again, until a new leader takes
// the proposals over.
func (g *group) flush(term int) {
	if g.term != term {
		return
	}
	if !g.quorum(g.leader) {
		g.w.after(netMax, func() { g.flush(term) })
		return
	}
	p := g.pending
	g.pending = nil
	g.flushAt = false
	for _, x := range p {
		x.done(g.commit(x.cmd))
	}
}

// readIndex serves a read once the leader has confirmed, a round trip
// later, that it still leads; it reads the state applied up to the
// commit index of that moment.
func (g *group) readIndex(m int, c command, respond func(reply)) {
	term := g.term
	g.w.after(2*(netMin+g.w.rng.Int64N(netMax-netMin)), func() {
		if g.term != term || g.leader != m || !g.quorum(m) {
			return // the round fails; the client times out and retries
		}
		if c.kind == cmdLookup {
			p := g.st.placement[c.store]
			respond(reply{epoch: p.epoch, group: p.group, moving: p.moving})
			return
		}
		if r, ok := g.refuse(c.store); ok {
			respond(r)
			return
		}
		ss := g.st.stores[c.store]
		if c.kind == cmdWatch {
			i, _ := slices.BinarySearchFunc(ss.events, c.token+1, func(e wevent, rev int64) int { return cmp.Compare(e.rev, rev) })
			respond(reply{events: slices.Clone(ss.events[i:min(len(ss.events), i+8)])})
			return
		}
		respond(reply{val: ss.kv[c.key]})
	})
}

// refuse answers for a store this group does not serve.
func (g *group) refuse(store string) (reply, bool) {
	ss := g.st.stores[store]
	switch {
	case ss == nil:
		return reply{status: stNotHere}, true
	case !ss.serving && ss.movedTo != 0:
		return reply{status: stWrongGroup, epoch: ss.epoch, group: ss.movedTo}, true
	case !ss.serving:
		return reply{status: stNotHere}, true
	}
	return reply{}, false
}

// commit appends c to the log and applies it.
func (g *group) commit(c command) reply {
	index := len(g.log)
	e := entry{cmd: c}
	r := g.apply(c, index, &e)
	g.log = append(g.log, e)
	return r
}

func (g *group) apply(c command, index int, e *entry) reply {
	w := g.w
	switch c.kind {
	case cmdPut, cmdAcquire, cmdRelease, cmdRenew, cmdExpire:
		if r, ok := g.refuse(c.store); ok {
			return r
		}
		next := g.st.rev + 1
		r, wrote := applyStore(g.st.stores[c.store], c, next)
		e.applied = true
		if wrote {
			g.st.rev = next
			e.rev = next
			if c.kind == cmdExpire {
				w.expired(c)
			}
		}
		return r
	case cmdFence:
		ss := g.st.stores[c.store]
		switch {
		case ss == nil:
			return reply{status: stNotHere}
		case ss.epoch >= c.epoch:
			return reply{index: ss.fenced, remaining: ss.remaining} // already fenced: the same answer
		}
		ss.serving, ss.epoch, ss.movedTo, ss.fenced = false, c.epoch, c.group, index
		// The fence freezes the store's leases: the source's leader
		// proposes no more expiries for them (the apply-time check
		// refuses any that were in flight), and each lease's remaining
		// TTL, measured at the fence, travels to the target.
		ss.remaining = map[int64]int64{}
		for id, d := range ss.leases {
			ss.remaining[id] = max(0, d-c.at)
		}
		return reply{index: index, remaining: ss.remaining}
	case cmdAdopt:
		if ss := g.st.stores[c.store]; ss != nil && ss.epoch >= c.epoch {
			return reply{}
		}
		cp := g.copies[c.store]
		if cp == nil || cp.ss == nil {
			return reply{status: stNotHere}
		}
		if !w.cfg.Bugs.AdoptBeforeCaughtUp && !w.cfg.Bugs.NoSourceFence {
			// A voter applies Adopt only once its learner copy of the
			// source reached the fence's index: the mover waited for
			// that before proposing, and a voter that restarted since
			// waits here (modelled as catching up at once).
			cp.catchUp(c.index)
		}
		ss := cp.ss.clone()
		ss.serving, ss.epoch, ss.movedTo = true, c.epoch, 0
		// Each lease restarts with the remaining TTL the fence measured,
		// counted from now: never shorter than its holder was told.
		for id := range ss.leases {
			if rem, ok := c.remaining[id]; ok {
				ss.leases[id] = c.at + rem
			}
		}
		if w.cfg.Bugs.NoLeaseMove {
			clear(ss.leases)
		}
		g.st.stores[c.store] = ss
		delete(g.copies, c.store)
		if !w.cfg.Bugs.NoRevisionFloor && g.st.rev < ss.lastRev {
			g.st.rev = ss.lastRev
		}
		w.checkOneServer(c.store)
		return reply{}
	case cmdDrop:
		if ss := g.st.stores[c.store]; ss != nil && !ss.serving {
			g.st.stores[c.store] = &storeState{epoch: ss.epoch, movedTo: ss.movedTo, fenced: ss.fenced}
		}
		return reply{}
	case cmdBeginMove:
		p := g.st.placement[c.store]
		if p.epoch+1 == c.epoch && !p.moving {
			p.moving, p.to = true, c.group
			g.st.placement[c.store] = p
		}
		p = g.st.placement[c.store]
		return reply{epoch: p.epoch, group: p.group, moving: p.moving}
	case cmdCommitMove:
		if p := g.st.placement[c.store]; p.epoch < c.epoch {
			g.st.placement[c.store] = placement{group: c.group, epoch: c.epoch}
		}
		return reply{}
	}
	panic("unknown command")
}

// lessor is the leader's lease loop: each tick, it proposes the expiry
// of every lease of a store it serves whose deadline has passed.
func (g *group) lessor() {
	w := g.w
	w.after(lessorEvery, g.lessor)
	if g.leader == 0 || g.id == 0 {
		return
	}
	for _, s := range w.stores {
		ss := g.st.stores[s]
		if ss == nil || !ss.serving {
			continue
		}
		for _, k := range w.keys {
			tok := ss.lock[k]
			if d, ok := ss.leases[tok]; ok && tok != 0 && d <= w.now {
				g.handle(g.leader, command{kind: cmdExpire, store: s, key: k, token: tok}, func(reply) {})
			}
		}
	}
}

// startCopy adds the target's members as learners of the source for
// store s: a snapshot first, then the log tail, one message at a time
// from the source's leader to the target's.
func (g *group) startCopy(s string, from *group) {
	if g.copies[s] != nil {
		return
	}
	cp := &copyState{store: s, from: from}
	g.copies[s] = cp
	g.tail(s, cp)
}

func (g *group) tail(s string, cp *copyState) {
	w := g.w
	if g.copies[s] != cp {
		return // adopted or abandoned
	}
	w.after(tailEvery, func() { g.tail(s, cp) })
	src := cp.from
	if cp.inflight != 0 || src.leader == 0 || g.leader == 0 {
		return
	}
	var deliver func()
	if cp.ss == nil {
		idx := len(src.log)
		ss := src.st.stores[s]
		if ss == nil {
			return
		}
		snap := ss.clone()
		deliver = func() {
			if cp.ss == nil {
				cp.ss, cp.index = snap, idx
			}
		}
	} else {
		from := cp.index
		to := min(len(src.log), from+tailBatch)
		if from == to {
			return
		}
		ents := src.log[from:to]
		deliver = func() {
			if cp.index == from {
				cp.replay(ents)
				cp.index = to
			}
		}
	}
	cp.gen++
	gen := cp.gen
	cp.inflight = gen
	w.send(src.leader, g.leader, func() {
		deliver()
		if cp.inflight == gen {
			cp.inflight = 0
		}
	})
	w.after(attemptTimeout, func() {
		if cp.inflight == gen {
			cp.inflight = 0 // lost: ask again
		}
	})
}

// replay applies the source's entries for the store to the copy, each
// at the revision it took in the source.
func (cp *copyState) replay(ents []entry) {
	for _, e := range ents {
		if e.cmd.store == cp.store && e.applied {
			applyStore(cp.ss, e.cmd, e.rev)
		}
	}
}

// catchUp brings the copy to the source's log index at once.
func (cp *copyState) catchUp(index int) {
	if cp.index < index {
		cp.replay(cp.from.log[cp.index:index])
		cp.index = index
	}
}
