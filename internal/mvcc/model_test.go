package mvcc

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"google.golang.org/protobuf/proto"
)

var (
	seedFlag  = flag.Int64("seed", 0, "seed for randomized tests (0 = time-based)")
	stepsFlag = flag.Int("steps", 400, "commands per randomized run")
)

func testSeed(t *testing.T) int64 {
	seed := *seedFlag
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	t.Logf("seed %d (replay with -seed %d)", seed, seed)
	return seed
}

// model is the dumb reference: a full copy of the keyspace per revision.
type model struct {
	states  []map[string]*dkvpb.KeyValue // states[rev]
	compact int64
}

// newModel is an empty store: at revision 1 (as etcd's), so states[0]
// and states[1] are both empty and the first write is revision 2.
func newModel() *model { return &model{states: []map[string]*dkvpb.KeyValue{{}, {}}} }

func (m *model) rev() int64                          { return int64(len(m.states) - 1) }
func (m *model) cur() map[string]*dkvpb.KeyValue     { return m.states[m.rev()] }
func (m *model) clone() map[string]*dkvpb.KeyValue   { return cloneState(m.cur()) }
func (m *model) commit(s map[string]*dkvpb.KeyValue) { m.states = append(m.states, s) }

func cloneState(s map[string]*dkvpb.KeyValue) map[string]*dkvpb.KeyValue {
	c := make(map[string]*dkvpb.KeyValue, len(s))
	for k, v := range s {
		c[k] = v
	}
	return c
}

func inSpan(k string, key, end []byte, prefix bool) bool {
	switch {
	case prefix:
		return strings.HasPrefix(k, string(key))
	case len(end) == 0:
		return k == string(key)
	case len(end) == 1 && end[0] == 0:
		return k >= string(key)
	default:
		return k >= string(key) && k < string(end)
	}
}

func (m *model) putIn(s map[string]*dkvpb.KeyValue, rev int64, p *dkvpb.PutRequest) {
	old := s[string(p.Key)]
	kv := &dkvpb.KeyValue{Key: p.Key, Value: p.Value, CreateRevision: rev, ModRevision: rev, Version: 1, Lease: p.Lease}
	if old != nil {
		kv.CreateRevision, kv.Version = old.CreateRevision, old.Version+1
		if p.IgnoreValue {
			kv.Value = old.Value
		}
	}
	s[string(p.Key)] = kv
}

func putCond(s map[string]*dkvpb.KeyValue, p *dkvpb.PutRequest) dkverr.Code {
	old := s[string(p.Key)]
	switch {
	case p.IfAbsent && old != nil,
		p.IfVersion > 0 && (old == nil || old.Version != p.IfVersion),
		p.IfModRevision > 0 && (old == nil || old.ModRevision != p.IfModRevision):
		return dkverr.Conflict
	case p.IgnoreValue && old == nil:
		return dkverr.InvalidInput
	}
	return dkverr.OK
}

func delCond(s map[string]*dkvpb.KeyValue, d *dkvpb.DeleteRangeRequest) dkverr.Code {
	if d.IfVersion > 0 {
		if old := s[string(d.Key)]; old == nil || old.Version != d.IfVersion {
			return dkverr.Conflict
		}
	}
	return dkverr.OK
}

func delIn(s map[string]*dkvpb.KeyValue, d *dkvpb.DeleteRangeRequest) int {
	n := 0
	for k := range s {
		if inSpan(k, d.Key, d.RangeEnd, d.Prefix) {
			delete(s, k)
			n++
		}
	}
	return n
}

func (m *model) rangeAt(req *dkvpb.RangeRequest, s map[string]*dkvpb.KeyValue) (kvs []*dkvpb.KeyValue, count int64) {
	for k, kv := range s {
		if inSpan(k, req.Key, req.RangeEnd, req.Prefix) {
			kvs = append(kvs, kv)
		}
	}
	sort.Slice(kvs, func(i, j int) bool { return bytes.Compare(kvs[i].Key, kvs[j].Key) < 0 })
	count = int64(len(kvs))
	if req.Limit > 0 && int64(len(kvs)) > req.Limit {
		kvs = kvs[:req.Limit]
	}
	return kvs, count
}

// apply returns the expected outcome code; it updates the model on success.
func (m *model) apply(req *dkvpb.InternalRequest) dkverr.Code {
	if Validate(req, Limits{}) != nil {
		return dkverr.InvalidInput
	}
	rev := m.rev() + 1
	switch r := req.Request.(type) {
	case *dkvpb.InternalRequest_Put:
		if c := putCond(m.cur(), r.Put); c != dkverr.OK {
			return c
		}
		s := m.clone()
		m.putIn(s, rev, r.Put)
		m.commit(s)
	case *dkvpb.InternalRequest_DeleteRange:
		if c := delCond(m.cur(), r.DeleteRange); c != dkverr.OK {
			return c
		}
		s := m.clone()
		if delIn(s, r.DeleteRange) > 0 {
			m.commit(s)
		}
	case *dkvpb.InternalRequest_Counter:
		c := r.Counter
		var n int64
		if old := m.cur()[string(c.Key)]; old != nil {
			v, err := strconv.ParseInt(string(old.Value), 10, 64)
			if err != nil {
				return dkverr.InvalidInput
			}
			n = v
		}
		sum := n + c.Delta
		if (c.Delta > 0 && sum < n) || (c.Delta < 0 && sum > n) {
			return dkverr.InvalidInput
		}
		if (c.Min != nil && sum < *c.Min) || (c.Max != nil && sum > *c.Max) {
			return dkverr.Conflict
		}
		s := m.clone()
		m.putIn(s, rev, &dkvpb.PutRequest{Key: c.Key, Value: []byte(strconv.FormatInt(sum, 10)), Lease: c.Lease})
		m.commit(s)
	case *dkvpb.InternalRequest_Compact:
		if r.Compact.Revision <= m.compact {
			return dkverr.Compacted
		}
		if r.Compact.Revision > m.rev() {
			return dkverr.InvalidInput
		}
		m.compact = r.Compact.Revision
	case *dkvpb.InternalRequest_Txn:
		ok := true
		for _, c := range r.Txn.Compare {
			if !modelCompare(m.cur(), c) {
				ok = false
			}
		}
		ops := r.Txn.Success
		if !ok {
			ops = r.Txn.Failure
		}
		// Sequential semantics: each op sees the previous ones.
		s := m.clone()
		wrote := false
		for _, op := range ops {
			switch o := op.Request.(type) {
			case *dkvpb.RequestOp_RequestPut:
				if c := putCond(s, o.RequestPut); c != dkverr.OK {
					return c
				}
				m.putIn(s, rev, o.RequestPut)
				wrote = true
			case *dkvpb.RequestOp_RequestDeleteRange:
				if c := delCond(s, o.RequestDeleteRange); c != dkverr.OK {
					return c
				}
				if delIn(s, o.RequestDeleteRange) > 0 {
					wrote = true
				}
			}
		}
		if wrote {
			m.commit(s)
		}
	}
	return dkverr.OK
}

func modelCompare(s map[string]*dkvpb.KeyValue, c *dkvpb.Compare) bool {
	kv := s[string(c.Key)]
	if kv == nil {
		kv = &dkvpb.KeyValue{}
	}
	var cmp int
	switch c.Target {
	case dkvpb.Compare_VERSION:
		cmp = cmpInt(kv.Version, c.GetVersion())
	case dkvpb.Compare_CREATE:
		cmp = cmpInt(kv.CreateRevision, c.GetCreateRevision())
	case dkvpb.Compare_MOD:
		cmp = cmpInt(kv.ModRevision, c.GetModRevision())
	case dkvpb.Compare_VALUE:
		cmp = bytes.Compare(kv.Value, c.GetValue())
	case dkvpb.Compare_EXISTS:
		if (s[string(c.Key)] != nil) != c.GetExists() {
			cmp = 1
		}
	}
	switch c.Result {
	case dkvpb.Compare_EQUAL:
		return cmp == 0
	case dkvpb.Compare_NOT_EQUAL:
		return cmp != 0
	case dkvpb.Compare_GREATER:
		return cmp > 0
	}
	return cmp < 0
}

// gen produces random commands over a small keyspace, with NUL and 0xFF
// bytes to exercise the history key escaping.
type gen struct {
	rnd *rand.Rand
	m   *model
}

var genKeys = []string{"a", "a\x00", "a\x00\x00", "a\x01", "ab", "abc", "b", "b\xff", "b\xff\xff", "c", "c/1", "c/2", "\x00", "\xff"}

func (g *gen) key() []byte { return []byte(genKeys[g.rnd.Intn(len(genKeys))]) }

func (g *gen) value() []byte {
	switch g.rnd.Intn(4) {
	case 0:
		return []byte(strconv.Itoa(g.rnd.Intn(20) - 10))
	case 1:
		return nil
	}
	return []byte(fmt.Sprintf("v%d", g.rnd.Intn(1000)))
}

func (g *gen) put() *dkvpb.PutRequest {
	p := &dkvpb.PutRequest{Key: g.key(), Value: g.value(), PrevKv: g.rnd.Intn(2) == 0}
	switch g.rnd.Intn(8) {
	case 0:
		p.IfAbsent = true
	case 1:
		p.IfVersion = int64(g.rnd.Intn(3) + 1)
	case 2:
		p.IfModRevision = g.m.rev() - int64(g.rnd.Intn(5))
	case 3:
		p.IgnoreValue, p.Value = true, nil
	}
	if g.rnd.Intn(4) == 0 {
		p.Lease = int64(g.rnd.Intn(3))
	}
	return p
}

func (g *gen) spanFields() (key, end []byte, prefix bool) {
	switch g.rnd.Intn(5) {
	case 0, 1:
		return g.key(), nil, false
	case 2:
		a, b := g.key(), g.key()
		if bytes.Compare(a, b) > 0 {
			a, b = b, a
		}
		return a, b, false
	case 3:
		if g.rnd.Intn(3) == 0 {
			return nil, nil, true
		}
		return g.key()[:1], nil, true
	}
	return g.key(), []byte{0}, false
}

func (g *gen) del() *dkvpb.DeleteRangeRequest {
	key, end, prefix := g.spanFields()
	d := &dkvpb.DeleteRangeRequest{Key: key, RangeEnd: end, Prefix: prefix, PrevKv: g.rnd.Intn(2) == 0}
	if !prefix && len(end) == 0 && g.rnd.Intn(4) == 0 {
		d.IfVersion = int64(g.rnd.Intn(3) + 1)
	}
	return d
}

func (g *gen) rangeReq() *dkvpb.RangeRequest {
	key, end, prefix := g.spanFields()
	r := &dkvpb.RangeRequest{Key: key, RangeEnd: end, Prefix: prefix}
	if g.rnd.Intn(3) == 0 {
		r.Limit = int64(g.rnd.Intn(4))
	}
	if g.rnd.Intn(2) == 0 && g.m.rev() > 0 {
		r.Revision = g.m.rev() - int64(g.rnd.Intn(int(g.m.rev())))
	}
	return r
}

func (g *gen) compare() *dkvpb.Compare {
	c := &dkvpb.Compare{Key: g.key(), Result: dkvpb.Compare_CompareResult(g.rnd.Intn(4))}
	switch g.rnd.Intn(5) {
	case 0:
		c.Target, c.TargetUnion = dkvpb.Compare_VERSION, &dkvpb.Compare_Version{Version: int64(g.rnd.Intn(3))}
	case 1:
		c.Target, c.TargetUnion = dkvpb.Compare_CREATE, &dkvpb.Compare_CreateRevision{CreateRevision: g.m.rev() - int64(g.rnd.Intn(3))}
	case 2:
		c.Target, c.TargetUnion = dkvpb.Compare_MOD, &dkvpb.Compare_ModRevision{ModRevision: g.m.rev() - int64(g.rnd.Intn(3))}
	case 3:
		c.Target, c.TargetUnion = dkvpb.Compare_VALUE, &dkvpb.Compare_Value{Value: g.value()}
	case 4:
		c.Target, c.TargetUnion = dkvpb.Compare_EXISTS, &dkvpb.Compare_Exists{Exists: g.rnd.Intn(2) == 0}
		c.Result = dkvpb.Compare_CompareResult([]int{0, 3}[g.rnd.Intn(2)])
	}
	return c
}

func (g *gen) ops() []*dkvpb.RequestOp {
	var ops []*dkvpb.RequestOp
	for i := g.rnd.Intn(4); i > 0; i-- {
		switch g.rnd.Intn(3) {
		case 0:
			ops = append(ops, &dkvpb.RequestOp{Request: &dkvpb.RequestOp_RequestPut{RequestPut: g.put()}})
		case 1:
			ops = append(ops, &dkvpb.RequestOp{Request: &dkvpb.RequestOp_RequestDeleteRange{RequestDeleteRange: g.del()}})
		case 2:
			r := g.rangeReq()
			r.Revision = 0
			ops = append(ops, &dkvpb.RequestOp{Request: &dkvpb.RequestOp_RequestRange{RequestRange: r}})
		}
	}
	return ops
}

func (g *gen) command() *dkvpb.InternalRequest {
	switch n := g.rnd.Intn(20); {
	case n < 8:
		return &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Put{Put: g.put()}}
	case n < 11:
		return &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_DeleteRange{DeleteRange: g.del()}}
	case n < 16:
		t := &dkvpb.TxnRequest{Success: g.ops(), Failure: g.ops()}
		for i := g.rnd.Intn(3); i > 0; i-- {
			t.Compare = append(t.Compare, g.compare())
		}
		return &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Txn{Txn: t}}
	case n < 19:
		c := &dkvpb.CounterRequest{Key: g.key(), Delta: int64(g.rnd.Intn(11) - 5)}
		if g.rnd.Intn(2) == 0 {
			c.Min = i64(int64(g.rnd.Intn(5) - 5))
		}
		if g.rnd.Intn(2) == 0 {
			c.Max = i64(int64(g.rnd.Intn(5)))
		}
		return &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Counter{Counter: c}}
	}
	return compactReq(g.m.compact + int64(g.rnd.Intn(4)))
}

// TestModel compares the Store to the reference model over random command
// sequences, applying several commands per batch, reading through the
// batch and the DB, purging, and reopening the Store mid-sequence.
func TestModel(t *testing.T) {
	seed := testSeed(t)
	for run := 0; run < 6; run++ {
		runModel(t, seed+int64(run), *stepsFlag)
	}
}

func runModel(t *testing.T, seed int64, steps int) {
	rnd := rand.New(rand.NewSource(seed))
	m := newModel()
	g := &gen{rnd: rnd, m: m}
	h := newHarness(t)
	fail := func(step int, format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d step %d: %s", seed, step, fmt.Sprintf(format, args...))
	}
	checkRead := func(step int, r pebble.Reader, req *dkvpb.RangeRequest) {
		t.Helper()
		resp, err := h.s.Range(r, req)
		rev := req.Revision
		if rev == 0 {
			rev = m.rev()
		}
		if rev < m.compact {
			if codeOf(err) != dkverr.Compacted {
				fail(step, "range %v at compacted revision: %v", req, err)
			}
			return
		}
		if err != nil {
			fail(step, "range %v: %v", req, err)
		}
		want, count := m.rangeAt(req, m.states[rev])
		if resp.Count != count || fmtKVs(resp.Kvs) != fmtKVs(want) || resp.Header.Revision != rev {
			fail(step, "range %v:\n got  %q count %d rev %d\n want %q count %d rev %d", req, fmtKVs(resp.Kvs), resp.Count, resp.Header.Revision, fmtKVs(want), count, rev)
		}
		for i := range want {
			if !proto.Equal(resp.Kvs[i], want[i]) {
				fail(step, "kv %v, want %v", resp.Kvs[i], want[i])
			}
		}
	}

	b := h.db.NewIndexedBatch()
	pending := 0
	commit := func() {
		if err := b.Commit(nil); err != nil {
			t.Fatal(err)
		}
		b.Close()
		b = h.db.NewIndexedBatch()
		pending = 0
	}
	for step := 0; step < steps; step++ {
		req := g.command()
		before := m.rev()
		want := m.apply(req)
		res := h.s.Apply(b, req)
		pending++
		if got := codeOf(res.Err); got != want {
			fail(step, "apply %v: got %v (%v), want %v", req, got, res.Err, want)
		}
		if res.Revision != m.rev() || h.s.Revision() != m.rev() || h.s.CompactRevision() != m.compact {
			fail(step, "revision %d/%d compact %d, model %d compact %d", res.Revision, h.s.Revision(), h.s.CompactRevision(), m.rev(), m.compact)
		}
		if m.rev() == before && len(res.Events) != 0 {
			fail(step, "events without a new revision")
		}
		if res.Err == nil {
			if hdr := proto.Clone(res.Resp).ProtoReflect(); hdr == nil {
				fail(step, "nil response")
			}
		}
		// Reads through the uncommitted batch see everything applied.
		checkRead(step, b, g.rangeReq())
		switch rnd.Intn(10) {
		case 0, 1, 2:
			commit()
			checkRead(step, h.db, g.rangeReq())
		case 3:
			commit()
			s, err := Open(h.db, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			h.s = s
		case 4:
			commit()
			if err := h.s.PurgeHistory(h.db, m.compact); err != nil {
				t.Fatal(err)
			}
			for rev := m.compact; rev <= m.rev(); rev++ {
				if rev > 0 {
					checkRead(step, h.db, &dkvpb.RangeRequest{Prefix: true, Revision: rev})
				}
			}
		}
	}
	commit()
	b.Close()
	for rev := m.compact; rev <= m.rev(); rev++ {
		if rev > 0 {
			checkRead(steps, h.db, &dkvpb.RangeRequest{Prefix: true, Revision: rev})
		}
	}
}

// TestDeterminism feeds the same commands to two stores, one committing
// after every command and one in large batches: they must end with equal
// hashes at every revision and byte-identical s/m keyspaces.
func TestDeterminism(t *testing.T) {
	seed := testSeed(t)
	rnd := rand.New(rand.NewSource(seed))
	m := newModel()
	g := &gen{rnd: rnd, m: m}
	var cmds []*dkvpb.InternalRequest
	for i := 0; i < 500; i++ {
		c := g.command()
		m.apply(c)
		cmds = append(cmds, c)
	}
	h1, h2 := newHarness(t), newHarness(t)
	for _, c := range cmds {
		h1.apply(c)
	}
	b := h2.db.NewIndexedBatch()
	for i, c := range cmds {
		h2.s.Apply(b, c)
		if i%37 == 0 {
			b.Commit(nil)
			b.Close()
			b = h2.db.NewIndexedBatch()
		}
	}
	if err := b.Commit(nil); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if d := diffKeyspace(t, h1.db, h2.db); d != "" {
		t.Fatalf("seed %d: %s", seed, d)
	}
	if h1.s.Revision() != m.rev() {
		t.Fatalf("revision %d, model %d", h1.s.Revision(), m.rev())
	}
	for rev := m.compact; rev <= m.rev(); rev++ {
		if rev == 0 {
			continue
		}
		x, _, _, err1 := h1.s.HashKV(h1.db, rev)
		y, _, _, err2 := h2.s.HashKV(h2.db, rev)
		if err1 != nil || err2 != nil || x != y {
			t.Fatalf("seed %d: hash at %d: %x %x %v %v", seed, rev, x, y, err1, err2)
		}
	}
}

// diffKeyspace compares the s/m keyspaces of two DBs byte for byte.
func diffKeyspace(t testing.TB, a, b *pebble.DB) string {
	dump := func(db *pebble.DB) []string {
		it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte("s/m"), UpperBound: []byte("s/n")})
		if err != nil {
			t.Fatal(err)
		}
		defer it.Close()
		var out []string
		for it.First(); it.Valid(); it.Next() {
			out = append(out, fmt.Sprintf("%q=%q", it.Key(), it.Value()))
		}
		return out
	}
	x, y := dump(a), dump(b)
	if len(x) == 0 {
		return "empty keyspace"
	}
	for i := 0; i < len(x) || i < len(y); i++ {
		if i >= len(x) || i >= len(y) || x[i] != y[i] {
			return fmt.Sprintf("keyspaces differ at entry %d (%d vs %d entries)", i, len(x), len(y))
		}
	}
	return ""
}
