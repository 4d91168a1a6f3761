package multigroup

import "fmt"

// record is one client operation for the history checker.
type record struct {
	client    int
	cmd       command
	out       reply
	unknown   bool // a write whose outcome the client could not learn
	call, ret int64
	callAt    int64 // simulated time of the call (an expiry: its stamped time)
}

// client runs operations one at a time. It routes by its cached
// placement, follows WrongGroup redirects whose epoch is newer than its
// cache, asks the meta group when a group says NotHere, and retries a
// write with the same sequence number (the group answers a repeat from
// the store's kept reply).
type client struct {
	w     *world
	id    int
	left  int
	seq   int
	cur   *op
	cache map[string]placement
	hint  map[int]int
	held  map[[2]string]int64 // (store, key) -> the token of a lock it holds
	reads []command           // final reads still to do (the checker's client)
}

type op struct {
	cmd     command
	start   int64
	call    int64
	attempt int
}

func newClient(w *world, id int) *client {
	return &client{w: w, id: id, left: w.cfg.OpsPerClient,
		cache: map[string]placement{}, hint: map[int]int{}, held: map[[2]string]int64{}}
}

func (c *client) next() {
	w := c.w
	if c.cur != nil {
		return
	}
	var cmd command
	switch {
	case len(c.reads) > 0:
		cmd, c.reads = c.reads[0], c.reads[1:]
	case c.left > 0:
		c.left--
		cmd = c.choose()
	default:
		return
	}
	c.seq++
	cmd.client, cmd.seq = c.id, c.seq
	c.cur = &op{cmd: cmd, start: w.now, call: w.tick()}
	c.try()
}

// choose picks the next operation: mostly gets and puts, some lock
// acquires; a key whose lock it holds gets fenced puts and a release; a
// few fenced puts carry a stale token, which must be refused.
func (c *client) choose() command {
	w := c.w
	s := w.stores[w.rng.IntN(len(w.stores))]
	k := w.keys[w.rng.IntN(len(w.keys))]
	val := fmt.Sprintf("c%d.%d", c.id, c.seq+1)
	if tok, ok := c.held[[2]string{s, k}]; ok {
		switch x := w.rng.IntN(20); {
		case x < 8:
			return command{kind: cmdRenew, store: s, key: k, token: tok}
		case x < 14:
			return command{kind: cmdPut, store: s, key: k, val: val, token: tok}
		case x < 17:
			return command{kind: cmdRelease, store: s, key: k, token: tok}
		}
		return command{kind: cmdGet, store: s, key: k}
	}
	switch x := w.rng.IntN(20); {
	case x < 8:
		return command{kind: cmdGet, store: s, key: k}
	case x < 15:
		return command{kind: cmdPut, store: s, key: k, val: val}
	case x < 19:
		return command{kind: cmdAcquire, store: s, key: k}
	}
	return command{kind: cmdPut, store: s, key: k, val: val, token: 1 + w.rng.Int64N(3)}
}

// try sends the current operation to the group its cache names.
func (c *client) try() {
	w := c.w
	o := c.cur
	if w.now-o.start > opDeadline {
		c.finish(reply{}, o.cmd.kind != cmdGet)
		return
	}
	p, ok := c.cache[o.cmd.store]
	if !ok {
		c.lookup()
		return
	}
	g := w.groups[p.group]
	c.send(g, o.cmd, func(r reply) {
		switch r.status {
		case stNotLeader:
			c.hint[g.id] = r.leader
			c.w.after(500, c.try)
		case stWrongGroup:
			if r.epoch > c.cache[o.cmd.store].epoch {
				c.cache[o.cmd.store] = placement{group: r.group, epoch: r.epoch}
				w.res.Redirects++
				c.try()
				return
			}
			delete(c.cache, o.cmd.store)
			c.w.after(2000, c.try)
		case stNotHere:
			delete(c.cache, o.cmd.store)
			c.w.after(2000, c.try)
		default:
			c.finish(r, false)
		}
	}, c.try)
}

// lookup reads the store's placement from the meta group.
func (c *client) lookup() {
	o := c.cur
	c.send(c.w.meta, command{kind: cmdLookup, store: o.cmd.store}, func(r reply) {
		if r.status == stNotLeader {
			c.hint[0] = r.leader
			c.w.after(500, c.try)
			return
		}
		if r.epoch > c.cache[o.cmd.store].epoch {
			c.cache[o.cmd.store] = placement{group: r.group, epoch: r.epoch}
		}
		c.try()
	}, c.try)
}

// send makes one attempt: to the member it believes leads g, else to
// one at random. An attempt unanswered within attemptTimeout calls
// retry; a late answer to an old attempt is ignored.
func (c *client) send(g *group, cmd command, onReply func(reply), retry func()) {
	w := c.w
	o := c.cur
	o.attempt++
	a := o.attempt
	m := c.hint[g.id]
	if m == 0 || !g.isMember(m) {
		m = g.members[w.rng.IntN(len(g.members))]
	}
	c.hint[g.id] = 0 // until a reply names the leader again
	w.send(0, m, func() {
		g.handle(m, cmd, func(r reply) {
			w.send(m, 0, func() {
				if c.cur == o && o.attempt == a {
					if r.status != stNotLeader {
						c.hint[g.id] = m
					}
					onReply(r)
				}
			})
		})
	})
	w.after(attemptTimeout, func() {
		if c.cur == o && o.attempt == a {
			retry()
		}
	})
}

func (c *client) finish(r reply, unknown bool) {
	w := c.w
	o := c.cur
	c.cur = nil
	rec := record{client: c.id, cmd: o.cmd, out: r, unknown: unknown, call: o.call, ret: w.tick(), callAt: o.start}
	if unknown {
		rec.ret = 1 << 62 // it may take effect at any time after its call
		w.res.Unknown++
	} else {
		w.res.Ops++
	}
	if !(unknown && o.cmd.kind == cmdGet) {
		w.history = append(w.history, rec)
	}
	key := [2]string{o.cmd.store, o.cmd.key}
	switch {
	case unknown:
	case o.cmd.kind == cmdAcquire && r.status == stOK:
		c.held[key] = r.token
	case o.cmd.kind == cmdRelease:
		delete(c.held, key) // released, or it was not ours any more
	case (o.cmd.kind == cmdPut || o.cmd.kind == cmdRenew) && o.cmd.token != 0 && r.status == stLocked:
		delete(c.held, key) // the lease expired: the lock is gone
	}
	w.after(100+w.rng.Int64N(3000), c.next)
}

// finalReads heals every fault and reads every key of every store once,
// so that a lost write shows in the history even if no client read the
// key after it.
func (w *world) finalReads() {
	for m := range w.up {
		w.up[m] = true
	}
	clear(w.cut)
	c := newClient(w, len(w.clients)+1)
	c.left = 0
	for _, s := range w.stores {
		for _, k := range w.keys {
			c.reads = append(c.reads, command{kind: cmdGet, store: s, key: k})
		}
	}
	w.clients = append(w.clients, c)
	c.next()
	limit := w.now + 60_000_000
	for len(w.events) > 0 && len(w.res.Violations) == 0 && (c.cur != nil || len(c.reads) > 0) {
		if w.now > limit {
			w.violate("the final reads did not finish")
			return
		}
		w.step()
	}
}
