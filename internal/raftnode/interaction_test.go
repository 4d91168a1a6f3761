package raftnode

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/dkv-io/dkv/internal/storage"
	"github.com/dkv-io/dkv/internal/testutil"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// TestInteraction runs the scripts in testdata/: raft members wired by an
// InmemNetwork, their ticks sent by hand, every message delivered when the
// script says so. Each script runs in a synctest bubble: after every
// command the harness waits (synctest.Wait) until every goroutine of the
// bubble — raft loops, apply goroutines, proposers — is blocked, so what a
// command prints does not depend on scheduling. Timers (the lost-proposal
// grace, back-offs) run on the bubble's fake clock, which only the
// advance command moves. Rewrite expected output with
// go test ./internal/raftnode -run TestInteraction -rewrite.
//
// Commands (ids are member ids, names label asynchronous calls):
//
//	add-nodes voters=(1,2,3)      bootstrap members with these voters
//	join 4                        start member 4 empty, to be added by a conf change
//	restart 1                     stop member 1 and start it again on its data
//	tick 1 [n=3]                  n raft ticks on member 1
//	campaign 1                    member 1 campaigns now
//	propose 1 p1                  Propose on member 1, in the background
//	conf-change 1 c1 add=4 | add-learner=4 | remove=3 [depose]
//	                              (depose: deliver what is queued for 1 right after raft took the change)
//	transfer-to 2                 member 2 gets MsgTimeoutNow from its leader and campaigns
//	read 1 r1                     WaitLinearizable on member 1, in the background
//	calls                         every call and how it ended (or pending)
//	msgs                          the messages queued on the network
//	deliver [from=1] [to=2] [type=MsgApp] [index=5]  deliver the queued messages selected
//	drop [from=1] [to=2] [type=MsgApp] [index=5]     lose them
//	stabilize                     deliver until nothing is left to deliver
//	isolate 1 | partition (1) (2,3) | hold 1 2 | heal
//	advance 200ms                 move the fake clock
//	status                        each member's raft role, term, commit, applied
//	reads 1                       member 1's ReadIndex batcher
//	applied 1                     what member 1's state machine applied, in order
//	log 1                         member 1's persisted raft log
//	trace on|off                  record persists and sends, in order; trace prints them
func TestInteraction(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		synctest.Test(t, func(t *testing.T) {
			c := newCluster(t)
			defer c.stop()
			datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
				out := c.handle(t, d)
				synctest.Wait()
				return out
			})
		})
	})
}

// cluster is the harness: members, the network between them, and the
// calls the script started.
type cluster struct {
	t     *testing.T
	net   *InmemNetwork
	nodes map[uint64]*tnode

	mu      sync.Mutex
	calls   []*call
	tracing bool
	trace   []string
}

type tnode struct {
	id    uint64
	fs    vfs.FS
	st    *storage.Storage
	n     *Node[uint64]
	sm    *traceSM
	ticks chan time.Time
	peers []raft.Peer
	join  bool
}

// call is a Propose, ProposeConfChange or WaitLinearizable running in the
// background.
type call struct {
	name, what string
	done       bool
	result     string
}

const (
	testTick          = 10 * time.Millisecond
	testElectionTicks = 10
)

func newCluster(t *testing.T) *cluster {
	return &cluster{t: t, net: NewInmemNetwork(), nodes: map[uint64]*tnode{}}
}

func (c *cluster) stop() {
	for _, id := range c.ids() {
		c.nodes[id].stop(c.t)
	}
}

func (c *cluster) ids() []uint64 {
	var ids []uint64
	for id := range c.nodes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (c *cluster) node(t *testing.T, s string) *tnode {
	t.Helper()
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("member id %q: %v", s, err)
	}
	n, ok := c.nodes[id]
	if !ok {
		t.Fatalf("no member %d", id)
	}
	return n
}

// start opens tn's storage (on its in-memory filesystem) and runs a Node
// on it.
func (c *cluster) start(t *testing.T, tn *tnode) {
	st, err := storage.Open("/data", storage.Options{FS: tn.fs, NoSync: true, Logger: testutil.Quiet})
	if err != nil {
		t.Fatal(err)
	}
	tn.st = st
	tn.sm = &traceSM{}
	tn.ticks = make(chan time.Time, 1)
	var known []uint64
	if tn.join {
		for id := range c.nodes {
			if id != tn.id {
				known = append(known, id)
			}
		}
	}
	n, err := New(Config[uint64]{
		ID: tn.id, Storage: st, StateMachine: tn.sm,
		Transport:    &tracingTransport{c: c, from: tn.id, t: c.net.Transport(tn.id)},
		TickInterval: testTick, ElectionTicks: testElectionTicks, Ticks: tn.ticks,
		Peers: tn.peers, Join: tn.join, KnownMembers: known,
		Logger: testutil.Quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	id := tn.id
	n.hooks = &hooks{persist: func(rd *raft.Ready) { c.record(id, "persist "+describeReady(rd)) }}
	tn.sm.node = n
	tn.n = n
	c.net.Add(tn.id, n)
	n.Run()
}

func (tn *tnode) stop(t *testing.T) {
	if tn.n == nil {
		return
	}
	tn.n.Stop()
	if err := tn.st.Close(); err != nil {
		t.Error(err)
	}
	tn.n = nil
}

func (c *cluster) record(id uint64, ev string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tracing {
		c.trace = append(c.trace, fmt.Sprintf("%d: %s", id, ev))
	}
}

// tracingTransport records each send in the cluster's trace.
type tracingTransport struct {
	c    *cluster
	from uint64
	t    Transport
}

func (t *tracingTransport) Send(msgs []*raftpb.Message) {
	for _, m := range msgs {
		t.c.record(t.from, "send "+describeMsg(m))
	}
	t.t.Send(msgs)
}

func (c *cluster) spawn(name, what string, f func() string) {
	cl := &call{name: name, what: what}
	c.mu.Lock()
	c.calls = append(c.calls, cl)
	c.mu.Unlock()
	go func() {
		res := f()
		c.mu.Lock()
		cl.done, cl.result = true, res
		c.mu.Unlock()
	}()
}

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return "error: " + err.Error()
}

func (c *cluster) handle(t *testing.T, d *datadriven.TestData) string {
	pos := func(i int) string {
		if i >= len(d.CmdArgs) {
			t.Fatalf("%s: missing argument %d", d.Cmd, i+1)
		}
		return d.CmdArgs[i].Key
	}
	switch d.Cmd {
	case "add-nodes":
		var voters []uint64
		d.ScanArgs(t, "voters", &voters)
		var peers []raft.Peer
		for _, id := range voters {
			peers = append(peers, raft.Peer{ID: id})
		}
		for _, id := range voters {
			tn := &tnode{id: id, fs: vfs.NewMem(), peers: peers}
			c.nodes[id] = tn
			c.start(t, tn)
		}
		return ""
	case "join":
		id, _ := strconv.ParseUint(pos(0), 10, 64)
		tn := &tnode{id: id, fs: vfs.NewMem(), join: true}
		c.nodes[id] = tn
		c.start(t, tn)
		return ""
	case "restart":
		tn := c.node(t, pos(0))
		tn.stop(t)
		c.start(t, tn)
		return ""
	case "tick":
		tn := c.node(t, pos(0))
		k := 1
		d.MaybeScanArgs(t, "n", &k)
		for range k {
			tn.ticks <- time.Time{}
			synctest.Wait()
		}
		return ""
	case "campaign":
		tn := c.node(t, pos(0))
		var err error
		if ierr := tn.n.Inspect(context.Background(), func(rn *raft.RawNode) { err = rn.Campaign() }); ierr != nil {
			t.Fatal(ierr)
		}
		if err != nil {
			return err.Error()
		}
		return ""
	case "transfer-to":
		// What a leader's transfer ends with: MsgTimeoutNow makes the
		// member campaign at once, even where voters heard from a leader
		// recently (no randomized election timeout involved).
		tn := c.node(t, pos(0))
		var bs raft.BasicStatus
		if err := tn.n.Inspect(context.Background(), func(rn *raft.RawNode) { bs = rn.BasicStatus() }); err != nil {
			t.Fatal(err)
		}
		m := &raftpb.Message{Type: raftpb.MsgTimeoutNow.Enum(), From: new(bs.Lead), To: new(tn.id), Term: new(bs.GetTerm())}
		if err := tn.n.Step(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		return ""
	case "propose":
		tn, name := c.node(t, pos(0)), pos(1)
		n := tn.n
		id := n.NextID()
		data := binary.BigEndian.AppendUint64(nil, id)
		data = append(data, name...)
		c.spawn(name, fmt.Sprintf("propose on %d", tn.id), func() string {
			idx, err := n.Propose(context.Background(), id, data)
			if err != nil {
				return errString(err)
			}
			return fmt.Sprintf("applied at index %d", idx)
		})
		return ""
	case "conf-change":
		tn, name := c.node(t, pos(0)), pos(1)
		var cc raftpb.ConfChangeV2
		for _, a := range d.CmdArgs[2:] {
			if a.Key == "depose" {
				continue
			}
			id, err := strconv.ParseUint(a.SingleVal(t), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			typ := map[string]raftpb.ConfChangeType{
				"add": raftpb.ConfChangeAddNode, "add-learner": raftpb.ConfChangeAddLearnerNode, "remove": raftpb.ConfChangeRemoveNode,
			}[a.Key]
			cc.Changes = append(cc.Changes, &raftpb.ConfChangeSingle{Type: typ.Enum(), NodeId: new(id)})
		}
		n := tn.n
		if d.HasArg("depose") {
			// Whatever is queued for the member reaches it right after the
			// change is stepped, before raft's next Ready.
			id := tn.id
			n.hooks.confStepped = func() {
				n.hooks.confStepped = nil
				c.net.Deliver(func(m *raftpb.Message) bool { return m.GetTo() == id })
			}
		}
		c.spawn(name, fmt.Sprintf("conf change on %d", tn.id), func() string {
			return errString(n.ProposeConfChange(context.Background(), &cc))
		})
		return ""
	case "read":
		tn, name := c.node(t, pos(0)), pos(1)
		n := tn.n
		c.spawn(name, fmt.Sprintf("read on %d", tn.id), func() string {
			if err := n.WaitLinearizable(context.Background()); err != nil {
				return errString(err)
			}
			return fmt.Sprintf("ok (applied %d)", n.applied.Load())
		})
		return ""
	case "calls":
		var b strings.Builder
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, cl := range c.calls {
			res := "pending"
			if cl.done {
				res = cl.result
			}
			fmt.Fprintf(&b, "%s (%s): %s\n", cl.name, cl.what, res)
		}
		return b.String()
	case "msgs":
		return describeMsgs(c.net.Pending())
	case "deliver":
		return describeMsgs(c.deliver(msgFilter(t, d)))
	case "drop":
		return describeMsgs(c.net.Drop(msgFilter(t, d)))
	case "stabilize":
		for len(c.deliver(nil)) > 0 {
		}
		return ""
	case "isolate":
		c.net.Isolate(c.node(t, pos(0)).id)
		return ""
	case "partition":
		var groups [][]uint64
		for _, a := range d.CmdArgs {
			var g []uint64
			for _, v := range append([]string{a.Key}, a.Vals...) {
				v = strings.Trim(v, "()")
				if v == "" {
					continue
				}
				id, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				g = append(g, id)
			}
			groups = append(groups, g)
		}
		c.net.Partition(groups...)
		return ""
	case "hold":
		c.net.SetLink(c.node(t, pos(0)).id, c.node(t, pos(1)).id, LinkHeld)
		return ""
	case "heal":
		c.net.Heal()
		return ""
	case "advance":
		dur, err := time.ParseDuration(pos(0))
		if err != nil {
			t.Fatal(err)
		}
		// Inside the bubble this returns once the fake clock has moved
		// dur, firing every timer due on the way; no real time passes.
		time.Sleep(dur)
		return ""
	case "status":
		var b strings.Builder
		for _, id := range c.ids() {
			tn := c.nodes[id]
			if tn.n == nil {
				fmt.Fprintf(&b, "%d: stopped\n", id)
				continue
			}
			var bs raft.BasicStatus
			if err := tn.n.Inspect(context.Background(), func(rn *raft.RawNode) { bs = rn.BasicStatus() }); err != nil {
				t.Fatal(err)
			}
			st := tn.n.Status()
			fmt.Fprintf(&b, "%d: %s term=%d lead=%d commit=%d applied=%d voters=%v learners=%v\n", id,
				strings.TrimPrefix(bs.RaftState.String(), "State"), bs.GetTerm(), bs.Lead, st.Commit, st.Applied,
				st.ConfState.GetVoters(), st.ConfState.GetLearners())
		}
		return b.String()
	case "reads":
		tn := c.node(t, pos(0))
		var s string
		if err := tn.n.Inspect(context.Background(), func(*raft.RawNode) {
			r := &tn.n.loop.reads
			s = fmt.Sprintf("queued=%d", len(r.queued))
			if r.inflight != nil {
				s += fmt.Sprintf(" inflight=(round %d, %d readers, sent at tick %d of %d)", r.seq, len(r.inflight.readers), r.inflight.sentAt, r.ticks)
			} else {
				s += " inflight=none"
			}
			for _, w := range r.waiting {
				s += fmt.Sprintf(" waiting=(read index %d, %d readers)", w.index, len(w.readers))
			}
		}); err != nil {
			t.Fatal(err)
		}
		return s + fmt.Sprintf("\napplied=%d\n", tn.n.applied.Load())
	case "applied":
		tn := c.node(t, pos(0))
		tn.sm.mu.Lock()
		defer tn.sm.mu.Unlock()
		return strings.Join(tn.sm.history, "\n") + "\n"
	case "log":
		tn := c.node(t, pos(0))
		first, err := tn.st.FirstIndex()
		if err != nil {
			t.Fatal(err)
		}
		last, err := tn.st.LastIndex()
		if err != nil {
			t.Fatal(err)
		}
		if last < first {
			return "empty\n"
		}
		ents, err := tn.st.Entries(first, last+1, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, e := range ents {
			fmt.Fprintf(&b, "%d/%d %s\n", e.GetTerm(), e.GetIndex(), describeEntry(e))
		}
		return b.String()
	case "trace":
		c.mu.Lock()
		defer c.mu.Unlock()
		switch {
		case len(d.CmdArgs) > 0 && d.CmdArgs[0].Key == "on":
			c.tracing = true
			return ""
		case len(d.CmdArgs) > 0 && d.CmdArgs[0].Key == "off":
			c.tracing = false
		}
		out := strings.Join(c.trace, "\n")
		c.trace = nil
		if out == "" {
			return "nothing\n"
		}
		return out + "\n"
	default:
		t.Fatalf("unknown command %q", d.Cmd)
		return ""
	}
}

// deliver delivers the queued messages match selects, one at a time,
// waiting after each until its recipient is done with it: members never
// run at the same time, so the order of what they send and trace does not
// depend on scheduling. Messages sent meanwhile wait for a later call.
func (c *cluster) deliver(match func(*raftpb.Message) bool) []*raftpb.Message {
	var out []*raftpb.Message
	for _, m := range c.net.Pending() {
		if match != nil && !match(m) {
			continue
		}
		out = append(out, c.net.Deliver(func(x *raftpb.Message) bool { return x == m })...)
		synctest.Wait()
	}
	return out
}

// msgFilter selects messages by from=, to= and type= (MsgApp, ...).
func msgFilter(t *testing.T, d *datadriven.TestData) func(*raftpb.Message) bool {
	var from, to, index uint64
	var typ string
	d.MaybeScanArgs(t, "from", &from)
	d.MaybeScanArgs(t, "to", &to)
	d.MaybeScanArgs(t, "type", &typ)
	d.MaybeScanArgs(t, "index", &index)
	return func(m *raftpb.Message) bool {
		return (from == 0 || m.GetFrom() == from) && (to == 0 || m.GetTo() == to) &&
			(typ == "" || m.GetType().String() == typ) && (index == 0 || m.GetIndex() == index)
	}
}

func describeMsgs(msgs []*raftpb.Message) string {
	if len(msgs) == 0 {
		return "none\n"
	}
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString(describeMsg(m))
		b.WriteByte('\n')
	}
	return b.String()
}

func describeMsg(m *raftpb.Message) string {
	s := fmt.Sprintf("%s %d->%d term=%d", m.GetType(), m.GetFrom(), m.GetTo(), m.GetTerm())
	switch m.GetType() {
	case raftpb.MsgApp:
		s += fmt.Sprintf(" log=%d/%d commit=%d", m.GetLogTerm(), m.GetIndex(), m.GetCommit())
	case raftpb.MsgAppResp:
		s += fmt.Sprintf(" index=%d", m.GetIndex())
		if m.GetReject() {
			s += " rejected"
		}
	case raftpb.MsgHeartbeat:
		s += fmt.Sprintf(" commit=%d", m.GetCommit())
	case raftpb.MsgReadIndexResp:
		s += fmt.Sprintf(" index=%d", m.GetIndex())
	case raftpb.MsgVote, raftpb.MsgPreVote:
		s += fmt.Sprintf(" log=%d/%d", m.GetLogTerm(), m.GetIndex())
	case raftpb.MsgVoteResp, raftpb.MsgPreVoteResp:
		if m.GetReject() {
			s += " rejected"
		}
	}
	if m.GetType() == raftpb.MsgHeartbeat || m.GetType() == raftpb.MsgHeartbeatResp || m.GetType() == raftpb.MsgReadIndex {
		if len(m.GetContext()) > 0 || len(m.GetEntries()) > 0 {
			s += " (read round)"
		}
	}
	if m.GetType() != raftpb.MsgReadIndex && m.GetType() != raftpb.MsgReadIndexResp && len(m.GetEntries()) > 0 {
		var es []string
		for _, e := range m.GetEntries() {
			es = append(es, describeEntry(e))
		}
		s += " [" + strings.Join(es, ", ") + "]"
	}
	return s
}

func describeEntry(e *raftpb.Entry) string {
	switch e.GetType() {
	case raftpb.EntryNormal:
		if len(e.GetData()) == 0 {
			return "empty"
		}
		if len(e.GetData()) > 8 {
			return string(e.GetData()[8:])
		}
		return fmt.Sprintf("%x", e.GetData())
	default:
		cc, err := decodeConfChange(e)
		if err != nil {
			return "bad conf change"
		}
		return "conf " + describeCC(cc)
	}
}

func describeCC(cc *raftpb.ConfChangeV2) string {
	var s []string
	for _, ch := range cc.GetChanges() {
		s = append(s, fmt.Sprintf("%s %d", strings.TrimPrefix(ch.GetType().String(), "ConfChange"), ch.GetNodeId()))
	}
	return strings.Join(s, ",")
}

func describeReady(rd *raft.Ready) string {
	var parts []string
	if hs := rd.HardState; hs != nil && !raft.IsEmptyHardState(hs) {
		parts = append(parts, fmt.Sprintf("hardstate term=%d vote=%d commit=%d", hs.GetTerm(), hs.GetVote(), hs.GetCommit()))
	}
	if len(rd.Entries) > 0 {
		var es []string
		for _, e := range rd.Entries {
			es = append(es, fmt.Sprintf("%d/%d %s", e.GetTerm(), e.GetIndex(), describeEntry(e)))
		}
		parts = append(parts, "entries ["+strings.Join(es, ", ")+"]")
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, " ")
}

// traceSM records every apply, with the configuration raft had when it
// ran, in order. Apply's result is the entry's index.
type traceSM struct {
	node *Node[uint64]

	mu      sync.Mutex
	history []string
	last    uint64 // index of the last Apply
}

func (m *traceSM) conf() string {
	cs := m.node.confState.Load()
	return fmt.Sprintf("voters=%v learners=%v", cs.GetVoters(), cs.GetLearners())
}

func (m *traceSM) Apply(_ *pebble.Batch, index uint64, data []byte) (uint64, uint64) {
	var id uint64
	name := fmt.Sprintf("%x", data)
	if len(data) > 8 {
		id, name = binary.BigEndian.Uint64(data), string(data[8:])
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.last = index
	m.history = append(m.history, fmt.Sprintf("%d %s (conf %s)", index, name, m.conf()))
	return id, index
}

func (m *traceSM) ApplyConfChange(_ *pebble.Batch, cc *raftpb.ConfChangeV2, _ []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.history = append(m.history, fmt.Sprintf("conf change %s (after applying %d)", describeCC(cc), m.last))
	return nil
}

func (m *traceSM) Committing() {}
func (m *traceSM) Committed(index uint64, _ []uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.history = append(m.history, fmt.Sprintf("batch committed through %d", index))
}
func (m *traceSM) Restored() error { return nil }
