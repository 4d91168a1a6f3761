package raftnode

import (
	"context"
	"sync"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Stepper is what an InmemNetwork delivers to: a Node's Step.
type Stepper interface {
	Step(ctx context.Context, m *raftpb.Message) error
}

// InmemNetwork wires raft members together in memory, for tests (the
// network twin of the peer transport; hashicorp/raft's InmemTransport is
// the model). Nothing moves on its own: what members send is queued, in
// send order, and reaches its recipient only when the test calls Deliver,
// so a multi-node test decides exactly what arrives, in what order, and
// what is lost. Links can be cut (their messages are dropped) or held
// (their messages wait until the link is restored: a delay).
type InmemNetwork struct {
	mu    sync.Mutex
	peers map[uint64]Stepper
	queue []*raftpb.Message
	links map[[2]uint64]LinkState
}

// LinkState is the state of the one-way link from one member to another.
type LinkState int

const (
	// LinkUp delivers.
	LinkUp LinkState = iota
	// LinkCut drops every message on the link, queued or sent later.
	LinkCut
	// LinkHeld keeps the link's messages queued, undelivered, until it is
	// up again.
	LinkHeld
)

// NewInmemNetwork returns an empty network with every link up.
func NewInmemNetwork() *InmemNetwork {
	return &InmemNetwork{peers: map[uint64]Stepper{}, links: map[[2]uint64]LinkState{}}
}

// Add connects member id (or replaces it, after a restart).
func (nw *InmemNetwork) Add(id uint64, s Stepper) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	nw.peers[id] = s
}

// Transport returns the Transport member id sends through.
func (nw *InmemNetwork) Transport(id uint64) Transport { return inmemTransport{nw: nw, from: id} }

type inmemTransport struct {
	nw   *InmemNetwork
	from uint64
}

// Send queues copies of msgs (raft may reuse what it handed out).
func (t inmemTransport) Send(msgs []*raftpb.Message) {
	t.nw.mu.Lock()
	defer t.nw.mu.Unlock()
	for _, m := range msgs {
		if t.nw.links[[2]uint64{t.from, m.GetTo()}] == LinkCut {
			continue
		}
		t.nw.queue = append(t.nw.queue, proto.Clone(m).(*raftpb.Message))
	}
}

// SetLink sets the state of the one-way link from -> to.
func (nw *InmemNetwork) SetLink(from, to uint64, s LinkState) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	if s == LinkUp {
		delete(nw.links, [2]uint64{from, to})
		return
	}
	nw.links[[2]uint64{from, to}] = s
}

// Isolate cuts every link into and out of id.
func (nw *InmemNetwork) Isolate(id uint64) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	for p := range nw.peers {
		if p != id {
			nw.links[[2]uint64{id, p}] = LinkCut
			nw.links[[2]uint64{p, id}] = LinkCut
		}
	}
}

// Partition cuts every link between members of different groups.
func (nw *InmemNetwork) Partition(groups ...[]uint64) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	for i, g := range groups {
		for j, h := range groups {
			if i == j {
				continue
			}
			for _, a := range g {
				for _, b := range h {
					nw.links[[2]uint64{a, b}] = LinkCut
				}
			}
		}
	}
}

// Heal brings every link up; held messages become deliverable.
func (nw *InmemNetwork) Heal() {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	clear(nw.links)
}

// Pending returns the queued messages, in send order (not copies: do not
// modify them).
func (nw *InmemNetwork) Pending() []*raftpb.Message {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return append([]*raftpb.Message(nil), nw.queue...)
}

// Drop removes the queued messages match selects (nil: all) and returns
// them.
func (nw *InmemNetwork) Drop(match func(*raftpb.Message) bool) []*raftpb.Message {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	var dropped []*raftpb.Message
	kept := nw.queue[:0]
	for _, m := range nw.queue {
		if match == nil || match(m) {
			dropped = append(dropped, m)
			continue
		}
		kept = append(kept, m)
	}
	clear(nw.queue[len(kept):])
	nw.queue = kept
	return dropped
}

// Deliver hands the queued messages match selects (nil: all) to their
// recipients, in send order, and returns them. Messages on a cut link are
// dropped, those on a held link or to an unknown member stay queued.
// Messages sent while delivering are queued for a later call.
func (nw *InmemNetwork) Deliver(match func(*raftpb.Message) bool) []*raftpb.Message {
	nw.mu.Lock()
	var out []*raftpb.Message
	var to []Stepper
	kept := nw.queue[:0]
	for _, m := range nw.queue {
		if match != nil && !match(m) {
			kept = append(kept, m)
			continue
		}
		switch nw.links[[2]uint64{m.GetFrom(), m.GetTo()}] {
		case LinkCut:
			continue
		case LinkHeld:
			kept = append(kept, m)
			continue
		}
		p, ok := nw.peers[m.GetTo()]
		if !ok {
			kept = append(kept, m)
			continue
		}
		out = append(out, m)
		to = append(to, p)
	}
	clear(nw.queue[len(kept):])
	nw.queue = kept
	nw.mu.Unlock()
	for i, m := range out {
		_ = to[i].Step(context.Background(), m) // ErrStopped: the member is down
	}
	return out
}
