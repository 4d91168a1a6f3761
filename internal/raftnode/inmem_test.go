package raftnode

import (
	"context"
	"slices"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

type recorder struct{ got []uint64 }

func (r *recorder) Step(_ context.Context, m *raftpb.Message) error {
	r.got = append(r.got, m.GetIndex())
	return nil
}

func msg(from, to, index uint64) *raftpb.Message {
	return &raftpb.Message{Type: raftpb.MsgApp.Enum(), From: new(from), To: new(to), Index: new(index)}
}

// The network delivers only when told, in send order; a cut link loses
// its messages, a held one keeps them until healed.
func TestInmemNetworkLinks(t *testing.T) {
	nw := NewInmemNetwork()
	r2, r3 := &recorder{}, &recorder{}
	nw.Add(2, r2)
	nw.Add(3, r3)
	tr := nw.Transport(1)

	tr.Send([]*raftpb.Message{msg(1, 2, 1), msg(1, 3, 2)})
	if len(r2.got)+len(r3.got) != 0 {
		t.Fatal("delivered before Deliver")
	}
	nw.Deliver(nil)
	if !slices.Equal(r2.got, []uint64{1}) || !slices.Equal(r3.got, []uint64{2}) {
		t.Fatalf("delivered %v to 2, %v to 3", r2.got, r3.got)
	}

	nw.SetLink(1, 2, LinkHeld)
	nw.Partition([]uint64{1}, []uint64{3})
	tr.Send([]*raftpb.Message{msg(1, 2, 3), msg(1, 3, 4)})
	nw.Deliver(nil)
	if len(r2.got) != 1 || len(r3.got) != 1 {
		t.Fatalf("held or cut link delivered: %v to 2, %v to 3", r2.got, r3.got)
	}
	if p := nw.Pending(); len(p) != 1 || p[0].GetIndex() != 3 {
		t.Fatalf("pending %v, want the held message only", p)
	}
	nw.Heal()
	nw.Deliver(nil)
	if !slices.Equal(r2.got, []uint64{1, 3}) || !slices.Equal(r3.got, []uint64{2}) {
		t.Fatalf("after heal: %v to 2, %v to 3", r2.got, r3.got)
	}

	tr.Send([]*raftpb.Message{msg(1, 2, 5), msg(1, 2, 6)})
	if d := nw.Drop(func(m *raftpb.Message) bool { return m.GetIndex() == 5 }); len(d) != 1 {
		t.Fatalf("dropped %d, want 1", len(d))
	}
	nw.Deliver(nil)
	if !slices.Equal(r2.got, []uint64{1, 3, 6}) {
		t.Fatalf("after drop: %v to 2", r2.got)
	}
}
