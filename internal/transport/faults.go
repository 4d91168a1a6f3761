package transport

import (
	"math/rand/v2"
	"sync"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// Faults injects network faults into a transport, for tests. The zero
// value injects none. Links are directed: (from, to).
type Faults struct {
	mu       sync.Mutex
	cut      map[[2]uint64]bool
	dropRate map[[2]uint64]float64
	delays   map[[2]uint64]time.Duration
	// types drops every message of a type a member sends; typeDrops
	// counts what it dropped.
	types     map[typeKey]bool
	typeDrops map[typeKey]int
}

type typeKey struct {
	from uint64
	typ  raftpb.MessageType
}

// DropType drops every message of type typ that member from sends (to
// anyone) until Heal, e.g. the proposals a follower forwards to its
// leader, while its heartbeats and read requests still pass.
func (f *Faults) DropType(from uint64, typ raftpb.MessageType) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.types == nil {
		f.types = map[typeKey]bool{}
	}
	f.types[typeKey{from, typ}] = true
}

// TypeDropped is how many messages of type typ from has had dropped by
// DropType (Heal does not reset it).
func (f *Faults) TypeDropped(from uint64, typ raftpb.MessageType) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.typeDrops[typeKey{from, typ}]
}

// dropSend reports whether a message of type typ from -> to is lost on
// sending: its type is dropped (DropType), or, unless it is a snapshot
// (which sendSnapshot checks on its own), its link is (drop). One lock,
// for each message sent.
func (f *Faults) dropSend(from, to uint64, typ raftpb.MessageType) bool {
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if k := (typeKey{from, typ}); f.types[k] {
		if f.typeDrops == nil {
			f.typeDrops = map[typeKey]int{}
		}
		f.typeDrops[k]++
		return true
	}
	return typ != raftpb.MsgSnap && f.dropLocked(from, to)
}

// Cut drops every message from -> to until Heal.
func (f *Faults) Cut(from, to uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cut == nil {
		f.cut = map[[2]uint64]bool{}
	}
	f.cut[[2]uint64{from, to}] = true
}

// SetDropRate drops each message from -> to with probability p.
func (f *Faults) SetDropRate(from, to uint64, p float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dropRate == nil {
		f.dropRate = map[[2]uint64]float64{}
	}
	f.dropRate[[2]uint64{from, to}] = p
}

// SetDelay delays each batch from -> to by d.
func (f *Faults) SetDelay(from, to uint64, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.delays == nil {
		f.delays = map[[2]uint64]time.Duration{}
	}
	f.delays[[2]uint64{from, to}] = d
}

// Heal removes every fault.
func (f *Faults) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cut, f.dropRate, f.delays, f.types = nil, nil, nil, nil
}

func (f *Faults) drop(from, to uint64) bool {
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dropLocked(from, to)
}

func (f *Faults) dropLocked(from, to uint64) bool {
	k := [2]uint64{from, to}
	if f.cut[k] {
		return true
	}
	if p := f.dropRate[k]; p > 0 {
		return rand.Float64() < p
	}
	return false
}

func (f *Faults) delay(from, to uint64) time.Duration {
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.delays[[2]uint64{from, to}]
}

// isCut reports a hard cut only (no random drop), for messages already
// queued when a cut starts.
func (f *Faults) isCut(from, to uint64) bool {
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cut[[2]uint64{from, to}]
}
