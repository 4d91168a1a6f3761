package multigroup

import (
	"runtime"
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// BenchmarkIdleGroupMemory measures the heap one idle raft group costs
// in go.etcd.io/raft alone: a RawNode that won its election, its
// MemoryStorage holding a short log, after 100 ticks of idling. DKV's
// own per-group parts (the Ready loop's goroutines, read batcher,
// lessor, watch hub) come on top; docs/design/multi-group.md adds them.
//
//	go test ./internal/sim/multigroup -run - -bench IdleGroupMemory -benchtime 1000x
func BenchmarkIdleGroupMemory(b *testing.B) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	nodes := make([]*raft.RawNode, 0, b.N)
	for i := 0; i < b.N; i++ {
		st := raft.NewMemoryStorage()
		// A group that starts as one voter, as a snapshot would leave it.
		if err := st.ApplySnapshot(&raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{
			Index: proto.Uint64(1), Term: proto.Uint64(1), ConfState: &raftpb.ConfState{Voters: []uint64{1}}}}); err != nil {
			b.Fatal(err)
		}
		rn, err := raft.NewRawNode(&raft.Config{ID: 1, ElectionTick: 10, HeartbeatTick: 1, Storage: st,
			MaxSizePerMsg: 1 << 20, MaxInflightMsgs: 256, CheckQuorum: true, PreVote: true,
			Logger: quietLogger{}})
		if err != nil {
			b.Fatal(err)
		}
		drain := func() {
			for rn.HasReady() {
				rd := rn.Ready()
				if !raft.IsEmptyHardState(rd.HardState) {
					if err := st.SetHardState(rd.HardState); err != nil {
						b.Fatal(err)
					}
				}
				if err := st.Append(rd.Entries); err != nil {
					b.Fatal(err)
				}
				rn.Advance(rd)
			}
		}
		drain()
		if err := rn.Campaign(); err != nil {
			b.Fatal(err)
		}
		drain()
		for t := 0; t < 100; t++ {
			rn.Tick()
			drain()
		}
		if rn.Status().RaftState != raft.StateLeader {
			b.Fatalf("group %d did not elect itself", i)
		}
		nodes = append(nodes, rn)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(len(nodes)), "heap-bytes/group")
	runtime.KeepAlive(nodes)
}

// quietLogger drops raft's log lines.
type quietLogger struct{ raft.Logger }

func (quietLogger) Debug(...any)            {}
func (quietLogger) Debugf(string, ...any)   {}
func (quietLogger) Info(...any)             {}
func (quietLogger) Infof(string, ...any)    {}
func (quietLogger) Warning(...any)          {}
func (quietLogger) Warningf(string, ...any) {}
