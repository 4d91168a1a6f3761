package multigroup

// mover moves stores one after another. In the design it runs on the
// meta group's leader and keeps its progress in the placement row; here
// it is an actor outside the cluster whose every step is an idempotent
// command retried until a leader answers, so a lost reply or a leader
// change only repeats a step.
type mover struct {
	w    *world
	done bool
	cl   *client // for its attempts: the mover talks to groups like a client
}

func (m *mover) next() {
	w := m.w
	if w.res.Moves >= w.cfg.Moves {
		m.done = true
		return
	}
	if m.cl == nil {
		m.cl = newClient(w, -1)
	}
	s := w.stores[w.rng.IntN(len(w.stores))]
	m.call(w.meta, command{kind: cmdLookup, store: s}, func(p reply) {
		if p.moving {
			m.w.after(5000, m.next)
			return
		}
		to := 1 + w.rng.IntN(w.cfg.Groups-1)
		if to >= p.group {
			to++
		}
		m.move(s, w.groups[p.group], w.groups[to], p.epoch+1)
	})
}

// move runs the protocol of docs/design/multi-group.md, "Moving a
// store": record the move; add learners on the target and let them
// catch up; fence the source; wait until the target's copy
// reached the fence; Adopt on the target; switch the placement; drop the
// source's copy.
func (m *mover) move(s string, src, dst *group, epoch int) {
	w := m.w
	bugs := w.cfg.Bugs
	m.call(w.meta, command{kind: cmdBeginMove, store: s, group: dst.id, epoch: epoch}, func(reply) {
		dst.startCopy(s, src)
		cp := dst.copies[s]
		// Fence only once the learners are close behind, so the store
		// is unavailable for a catch-up of a few entries, not a snapshot.
		m.await(func() bool { return cp.ss != nil && cp.index+tailBatch >= len(src.log) }, func() {
			adopt := func(j int, remaining map[int64]int64) {
				m.call(dst, command{kind: cmdAdopt, store: s, group: src.id, epoch: epoch, index: j, remaining: remaining}, func(reply) {
					m.call(w.meta, command{kind: cmdCommitMove, store: s, group: dst.id, epoch: epoch}, func(reply) {
						m.call(src, command{kind: cmdDrop, store: s}, func(reply) {
							w.res.Moves++
							w.after(10000+w.rng.Int64N(30000), m.next)
						})
					})
				})
			}
			if bugs.NoSourceFence {
				adopt(cp.index, nil)
				return
			}
			m.call(src, command{kind: cmdFence, store: s, group: dst.id, epoch: epoch}, func(r reply) {
				if bugs.AdoptBeforeCaughtUp {
					adopt(r.index, r.remaining)
					return
				}
				m.await(func() bool { return cp.index >= r.index }, func() { adopt(r.index, r.remaining) })
			})
		})
	})
}

// await runs then once cond holds, checking each millisecond of
// simulated time (the mover watching its learners' progress).
func (m *mover) await(cond func() bool, then func()) {
	if cond() {
		then()
		return
	}
	m.w.after(1000, func() { m.await(cond, then) })
}

// call sends c to g until a leader answers, then hands the reply on.
func (m *mover) call(g *group, c command, then func(reply)) {
	cl := m.cl
	cl.cur = &op{cmd: c, start: m.w.now}
	var try func()
	try = func() {
		cl.send(g, c, func(r reply) {
			if r.status == stNotLeader {
				cl.hint[g.id] = r.leader
				m.w.after(500, try)
				return
			}
			cl.cur = nil
			then(r)
		}, try)
	}
	try()
}
