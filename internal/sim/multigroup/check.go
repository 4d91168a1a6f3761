package multigroup

import (
	"fmt"
	"time"

	"github.com/anishathalye/porcupine"
)

// keyState is the sequential specification's state of one key of one
// store: its value, the token of the lock on it (0: none, -1: taken by
// an acquire whose token nobody learned) and the highest token issued.
type keyState struct {
	val  string
	lock int64
	last int64
}

// step is the sequential specification. A fenced put or release must
// carry the holder's token; a plain put on a locked key is refused; an
// acquire on a free key succeeds with a token above every earlier one.
// An unknown outcome may or may not have happened: porcupine may place
// it at the end of the history, where it changes nothing a reader saw.
func step(s keyState, r record) (bool, keyState) {
	c, out := r.cmd, r.out
	switch c.kind {
	case cmdGet:
		return out.status == stOK && out.val == s.val, s
	case cmdPut:
		if s.lock != c.token {
			return r.unknown || out.status == stLocked, s
		}
		if !r.unknown && out.status != stOK {
			return false, s
		}
		s.val = c.val
		return true, s
	case cmdAcquire:
		if s.lock != 0 {
			return r.unknown || out.status == stLocked, s
		}
		if r.unknown {
			s.lock = -1
			return true, s
		}
		if out.status != stOK || out.token <= s.last {
			return false, s
		}
		s.lock, s.last = out.token, out.token
		return true, s
	case cmdRelease:
		if s.lock != c.token {
			return r.unknown || out.status == stLocked, s
		}
		if !r.unknown && out.status != stOK {
			return false, s
		}
		s.lock = 0
		return true, s
	case cmdRenew:
		if s.lock != c.token {
			return r.unknown || out.status == stLocked, s
		}
		return r.unknown || out.status == stOK, s
	case cmdExpire:
		// Only applied expiries are recorded: the lock was held by that
		// token (or by an acquire whose token nobody learned).
		if s.lock != c.token && s.lock != -1 {
			return false, s
		}
		s.lock = 0
		s.last = max(s.last, c.token)
		return true, s
	}
	return false, s
}

func describe(r record) string {
	c, out := r.cmd, r.out
	res := out.status.String()
	if r.unknown {
		res = "unknown"
	}
	switch c.kind {
	case cmdGet:
		return fmt.Sprintf("c%d get %s/%s -> %s %q", r.client, c.store, c.key, res, out.val)
	case cmdPut:
		return fmt.Sprintf("c%d put %s/%s=%s token %d -> %s", r.client, c.store, c.key, c.val, c.token, res)
	case cmdAcquire:
		return fmt.Sprintf("c%d acquire %s/%s -> %s token %d", r.client, c.store, c.key, res, out.token)
	case cmdRelease:
		return fmt.Sprintf("c%d release %s/%s token %d -> %s", r.client, c.store, c.key, c.token, res)
	case cmdRenew:
		return fmt.Sprintf("c%d renew %s/%s token %d -> %s", r.client, c.store, c.key, c.token, res)
	case cmdExpire:
		return fmt.Sprintf("lease of %s/%s token %d expired at t=%dus", c.store, c.key, c.token, c.at)
	}
	return "?"
}

var model = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[[2]string][]porcupine.Operation{}
		var order [][2]string
		for _, o := range h {
			r := o.Input.(record)
			k := [2]string{r.cmd.store, r.cmd.key}
			if _, ok := by[k]; !ok {
				order = append(order, k)
			}
			by[k] = append(by[k], o)
		}
		out := make([][]porcupine.Operation, 0, len(order))
		for _, k := range order {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() any { return keyState{} },
	Step: func(state, input, _ any) (bool, any) {
		return step(state.(keyState), input.(record))
	},
	DescribeOperation: func(input, _ any) string { return describe(input.(record)) },
	DescribeState: func(state any) string {
		s := state.(keyState)
		return fmt.Sprintf("%q lock %d last %d", s.val, s.lock, s.last)
	},
}

// checkHistory checks that each store's history is linearizable. On a
// violation it names a key and the operations on it.
func (w *world) checkHistory() {
	ops := make([]porcupine.Operation, 0, len(w.history))
	for _, r := range w.history {
		ops = append(ops, porcupine.Operation{ClientId: r.client, Input: r, Call: r.call, Output: nil, Return: r.ret})
	}
	if v := checkLeases(w.history); len(v) > 0 {
		w.violate("%s", v[0])
		return
	}
	res, info := porcupine.CheckOperationsVerbose(model, ops, 20*time.Second)
	switch res {
	case porcupine.Ok:
		return
	case porcupine.Unknown:
		w.violate("the linearizability check timed out")
		return
	}
	// Name the first key whose history fails on its own.
	for _, part := range model.Partition(ops) {
		if porcupine.CheckOperations(model, part) {
			continue
		}
		r := part[0].Input.(record)
		w.violate("store %s key %s: history not linearizable (%d ops); %s",
			r.cmd.store, r.cmd.key, len(part), w.explain(part, info))
		return
	}
	w.violate("history not linearizable")
}

// explain replays the key's operations in the order they returned and
// names the first one the specification rejects: usually the read that
// missed an acknowledged write, or the acquire that succeeded on a held
// lock.
func (w *world) explain(part []porcupine.Operation, _ porcupine.LinearizationInfo) string {
	recs := make([]record, 0, len(part))
	for _, o := range part {
		recs = append(recs, o.Input.(record))
	}
	// Insertion sort by return stamp: the partitions are small.
	for i := 1; i < len(recs); i++ {
		for j := i; j > 0 && recs[j].ret < recs[j-1].ret; j-- {
			recs[j], recs[j-1] = recs[j-1], recs[j]
		}
	}
	s := keyState{}
	for _, r := range recs {
		ok, next := step(s, r)
		if !ok {
			return fmt.Sprintf("in return order, %q is impossible after state {%s}", describe(r), model.DescribeState(s))
		}
		s = next
	}
	return "no single op is impossible in return order; the overlap of calls is"
}

// checkLeases checks that no lease expired before its holder's last
// acknowledged grant or renewal allowed: a holder that called at time C
// and got OK may rely on its lease until C + leaseTTL, move or no move.
func checkLeases(history []record) []string {
	type lockID struct {
		store, key string
		token      int64
	}
	relied := map[lockID]int64{}
	for _, r := range history {
		if r.unknown || r.out.status != stOK {
			continue
		}
		switch r.cmd.kind {
		case cmdAcquire:
			id := lockID{r.cmd.store, r.cmd.key, r.out.token}
			relied[id] = max(relied[id], r.callAt+leaseTTL)
		case cmdRenew:
			id := lockID{r.cmd.store, r.cmd.key, r.cmd.token}
			relied[id] = max(relied[id], r.callAt+leaseTTL)
		}
	}
	var out []string
	for _, r := range history {
		if r.cmd.kind != cmdExpire {
			continue
		}
		id := lockID{r.cmd.store, r.cmd.key, r.cmd.token}
		if until, ok := relied[id]; ok && r.cmd.at < until {
			out = append(out, fmt.Sprintf("the lease of %s/%s token %d expired at t=%dus, but its holder was told it holds until t=%dus",
				id.store, id.key, id.token, r.cmd.at, until))
		}
	}
	return out
}
