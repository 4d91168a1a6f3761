package multigroup

import "fmt"

// watcher follows one store's events from revision 0 for the whole run,
// across moves: it asks the group its placement names for the events
// after the last revision it saw, follows WrongGroup and NotHere like a
// client, and resumes on the target from that revision. What it saw
// must be, event for event, a prefix of the store's final change log.
type watcher struct {
	c     *client
	store string
	last  int64
	seen  []wevent
	moves int // times it followed the store to another group
	group int
}

func newWatcher(w *world, id int, store string) *watcher {
	return &watcher{c: newClient(w, id), store: store}
}

func (wt *watcher) poll() {
	w := wt.c.w
	if w.done() || len(w.res.Violations) > 0 {
		return
	}
	c := wt.c
	c.cur = &op{cmd: command{kind: cmdWatch, store: wt.store, token: wt.last}, start: w.now}
	p, ok := c.cache[wt.store]
	if !ok {
		c.send(w.meta, command{kind: cmdLookup, store: wt.store}, func(r reply) {
			if r.status == stOK && r.epoch > c.cache[wt.store].epoch {
				c.cache[wt.store] = placement{group: r.group, epoch: r.epoch}
			}
			wt.again(500)
		}, func() { wt.again(0) })
		return
	}
	c.send(w.groups[p.group], c.cur.cmd, func(r reply) {
		switch r.status {
		case stOK:
			if wt.group != 0 && wt.group != p.group {
				wt.moves++
			}
			wt.group = p.group
			for _, e := range r.events {
				if e.rev <= wt.last {
					w.violate("watch on store %s: revision %d after %d", wt.store, e.rev, wt.last)
					return
				}
				wt.last = e.rev
				wt.seen = append(wt.seen, e)
			}
			wt.again(1000 + w.rng.Int64N(2000))
		case stWrongGroup:
			if r.epoch > c.cache[wt.store].epoch {
				c.cache[wt.store] = placement{group: r.group, epoch: r.epoch}
			} else {
				delete(c.cache, wt.store)
			}
			wt.again(0)
		default: // NotHere, NotLeader
			if r.status == stNotLeader {
				c.hint[p.group] = r.leader
			} else {
				delete(c.cache, wt.store)
			}
			wt.again(1000)
		}
	}, func() { wt.again(0) })
}

func (wt *watcher) again(d int64) {
	wt.c.cur = nil
	wt.c.w.after(d, wt.poll)
}

// checkWatches compares what each watcher saw with its store's change
// log in the group that serves it at the end.
func (w *world) checkWatches() {
	for _, wt := range w.watchers {
		gs := w.servingGroups(wt.store)
		if len(gs) != 1 {
			continue
		}
		final := w.groups[gs[0]].st.stores[wt.store].events
		if len(wt.seen) > len(final) {
			w.violate("watch on store %s saw %d events, but the store's history has %d", wt.store, len(wt.seen), len(final))
			return
		}
		for i, e := range wt.seen {
			if e != final[i] {
				w.violate("watch on store %s: event %d was %s, but the store's history has %s there",
					wt.store, i, describeEvent(e), describeEvent(final[i]))
				return
			}
		}
		w.res.WatchEvents += len(wt.seen)
		w.res.WatchMoves += wt.moves
	}
}

func describeEvent(e wevent) string {
	return fmt.Sprintf("{rev %d %s=%s}", e.rev, e.key, e.val)
}
