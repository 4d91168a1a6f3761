package mvcc

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/keys"
)

// qmKey is one key's state in the query model.
type qmKey struct {
	labels map[string]string
	lease  int64
}

// qmIndex is an index the model knows: usable at revisions >= created.
type qmIndex struct {
	prefix, label string
	created       int64
}

// qmQuery is a generated query: its text and an independent predicate.
type qmQuery struct {
	text   string
	prefix string
	alts   [][]string
	match  func(key string, ls map[string]string) bool
}

var qmValues = map[string][]string{
	"state":    {"open", "paid", "shipped"},
	"customer": {"1", "2", "3", "4"},
	"tier":     {"a", "ab", "b", "c"},
}

func genQuery(rng *rand.Rand) qmQuery {
	prefixes := []string{"o/", "o/1", "", "x/"}
	q := qmQuery{prefix: prefixes[rng.Intn(len(prefixes))]}
	var parts []string
	if q.prefix != "" || rng.Intn(2) == 0 {
		parts = append(parts, "prefix="+q.prefix)
	}
	type pred func(map[string]string) bool
	var altPreds [][]pred
	nalts := 1 + rng.Intn(2)
	for a := 0; a < nalts; a++ {
		if a > 0 {
			parts = append(parts, "OR")
		}
		var ps []pred
		var names []string
		for n := 1 + rng.Intn(2); n > 0; n-- {
			names0 := []string{"state", "customer", "tier"}
			name := names0[rng.Intn(3)]
			vals := qmValues[name]
			names = append(names, name)
			switch rng.Intn(4) {
			case 0, 1:
				v1, v2 := vals[rng.Intn(len(vals))], vals[rng.Intn(len(vals))]
				if rng.Intn(2) == 0 {
					parts = append(parts, name+"="+v1)
					ps = append(ps, func(ls map[string]string) bool { v, ok := ls[name]; return ok && v == v1 })
				} else {
					parts = append(parts, name+"="+v1+"|"+v2)
					ps = append(ps, func(ls map[string]string) bool { v, ok := ls[name]; return ok && (v == v1 || v == v2) })
				}
			case 2:
				p := vals[rng.Intn(len(vals))][:1]
				parts = append(parts, name+"^="+p)
				ps = append(ps, func(ls map[string]string) bool { v, ok := ls[name]; return ok && strings.HasPrefix(v, p) })
			case 3:
				lo, hi := vals[rng.Intn(len(vals))], vals[rng.Intn(len(vals))]
				loOp, hiOp := []string{">", ">="}[rng.Intn(2)], []string{"<", "<="}[rng.Intn(2)]
				parts = append(parts, name+loOp+lo, name+hiOp+hi)
				ps = append(ps, func(ls map[string]string) bool {
					v, ok := ls[name]
					if !ok {
						return false
					}
					okLo := v > lo || (loOp == ">=" && v == lo)
					okHi := v < hi || (hiOp == "<=" && v == hi)
					return okLo && okHi
				})
			}
		}
		altPreds = append(altPreds, ps)
		q.alts = append(q.alts, names)
	}
	q.text = strings.Join(parts, " ")
	prefix := q.prefix
	q.match = func(key string, ls map[string]string) bool {
		if !strings.HasPrefix(key, prefix) {
			return false
		}
		for _, ps := range altPreds {
			all := true
			for _, p := range ps {
				if !p(ls) {
					all = false
					break
				}
			}
			if all {
				return true
			}
		}
		return false
	}
	return q
}

// usable reports whether every alternative of q has an index at rev.
func (q qmQuery) usable(idx []qmIndex, rev int64) bool {
	for _, names := range q.alts {
		ok := false
		for _, n := range names {
			for _, d := range idx {
				if d.label == n && strings.HasPrefix(q.prefix, d.prefix) && d.created <= rev {
					ok = true
				}
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// qmHarness is a store on an in-memory filesystem that can be reopened
// (a restart) or replaced by a copy of its state span (a snapshot
// install).
type qmHarness struct {
	t  *testing.T
	fs vfs.FS
	db *pebble.DB
	s  *Store
}

func (h *qmHarness) open() {
	db, err := pebble.Open("", &pebble.Options{FS: h.fs, Logger: quietLogger{}})
	if err != nil {
		h.t.Fatal(err)
	}
	s, err := Open(db, Limits{})
	if err != nil {
		h.t.Fatal(err)
	}
	h.db, h.s = db, s
}

func (h *qmHarness) apply(req *dkvpb.InternalRequest) Result {
	b := h.db.NewIndexedBatch()
	res := h.s.Apply(b, req)
	h.s.BeginCommit()
	if err := b.Commit(pebble.NoSync); err != nil {
		h.t.Fatal(err)
	}
	h.s.EndCommit()
	b.Close()
	return res
}

func (h *qmHarness) restart() {
	if err := h.db.Close(); err != nil {
		h.t.Fatal(err)
	}
	h.open()
}

// snapshot copies the state span into a fresh filesystem, as a raft
// snapshot install does, and continues there.
func (h *qmHarness) snapshot() {
	fs := vfs.NewMem()
	dst, err := pebble.Open("", &pebble.Options{FS: fs, Logger: quietLogger{}})
	if err != nil {
		h.t.Fatal(err)
	}
	it, err := h.db.NewIter(&pebble.IterOptions{LowerBound: keys.StateStart, UpperBound: keys.StateEnd})
	if err != nil {
		h.t.Fatal(err)
	}
	b := dst.NewBatch()
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			h.t.Fatal(err)
		}
		if err := b.Set(it.Key(), v, nil); err != nil {
			h.t.Fatal(err)
		}
	}
	it.Close()
	if err := b.Commit(pebble.Sync); err != nil {
		h.t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		h.t.Fatal(err)
	}
	h.db.Close()
	h.fs = fs
	h.open()
}

// TestQueryModel applies random puts (with random labels), deletes,
// txns, lease revocations, index creations, compactions, restarts and
// snapshot installs, and checks random queries at random revisions,
// through the indexes and by scanning, paged, against a brute-force
// filter of a model of every revision's keyspace.
func TestQueryModel(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewSource(seed))
	h := &qmHarness{t: t, fs: vfs.NewMem()}
	h.open()
	defer func() { h.db.Close() }()
	for id := int64(1); id <= 3; id++ {
		h.apply(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseGrant{LeaseGrant: &dkvpb.LeaseGrantRequest{Id: id, TtlMs: 60_000}}})
	}
	states := []map[string]qmKey{{}, {}} // states[rev]
	cur := func() int64 { return int64(len(states) - 1) }
	var compact int64
	var idx []qmIndex
	createIndex := func(prefix, label string) {
		res := h.apply(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_IndexCreate{IndexCreate: &dkvpb.IndexCreateRequest{Prefix: []byte(prefix), Label: label}}})
		if res.Err != nil {
			t.Fatalf("index create: %v", res.Err)
		}
		if res.Revision != cur() {
			t.Fatalf("index create moved the revision to %d from %d", res.Revision, cur())
		}
		idx = append(idx, qmIndex{prefix, label, cur()})
	}
	createIndex("o/", "state")
	createIndex("", "customer")
	keyNames := []string{"o/1a", "o/1b", "o/2", "o/3", "o/\x00z", "x/1", "x/2", "other"}
	randLabels := func() map[string]string {
		ls := map[string]string{}
		for name, vals := range qmValues {
			if rng.Intn(3) > 0 {
				ls[name] = vals[rng.Intn(len(vals))]
			}
		}
		if len(ls) == 0 {
			return nil
		}
		return ls
	}
	steps := *stepsFlag
	for step := 0; step < steps; step++ {
		next := map[string]qmKey{}
		for k, v := range states[cur()] {
			next[k] = v
		}
		changed := false
		switch op := rng.Intn(20); {
		case op < 9: // put
			k := keyNames[rng.Intn(len(keyNames))]
			p := &dkvpb.PutRequest{Key: []byte(k), Value: []byte(fmt.Sprint(step)), Labels: randLabels()}
			old, exists := next[k]
			if exists && rng.Intn(5) == 0 {
				p.Labels, p.IgnoreLabels = nil, true
			}
			if rng.Intn(4) == 0 {
				p.Lease = 1 + rng.Int63n(3)
			}
			res := h.apply(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Put{Put: p}})
			if res.Err != nil {
				t.Fatalf("step %d put: %v", step, res.Err)
			}
			nk := qmKey{labels: p.Labels, lease: p.Lease}
			if p.IgnoreLabels {
				nk.labels = old.labels
			}
			next[k], changed = nk, true
		case op < 12: // delete a key or a prefix
			d := &dkvpb.DeleteRangeRequest{Key: []byte(keyNames[rng.Intn(len(keyNames))])}
			if rng.Intn(3) == 0 {
				d.Key, d.Prefix = []byte("o/1"), true
			}
			res := h.apply(delReq(d))
			if res.Err != nil {
				t.Fatalf("step %d delete: %v", step, res.Err)
			}
			for k := range next {
				if (d.Prefix && strings.HasPrefix(k, string(d.Key))) || k == string(d.Key) {
					delete(next, k)
					changed = true
				}
			}
		case op < 14: // txn: put one key, delete another, if a label compare holds
			a, b := keyNames[rng.Intn(len(keyNames))], keyNames[rng.Intn(len(keyNames))]
			if a == b {
				continue
			}
			want := qmValues["state"][rng.Intn(3)]
			ls := randLabels()
			tx := &dkvpb.TxnRequest{
				Compare: []*dkvpb.Compare{{Target: dkvpb.Compare_LABEL, Key: []byte(a), Label: "state", TargetUnion: &dkvpb.Compare_Value{Value: []byte(want)}}},
				Success: []*dkvpb.RequestOp{
					{Request: &dkvpb.RequestOp_RequestPut{RequestPut: &dkvpb.PutRequest{Key: []byte(a), Value: []byte("t"), Labels: ls}}},
					opDel(b),
				},
			}
			res := h.apply(txnReq(tx))
			if res.Err != nil {
				t.Fatalf("step %d txn: %v", step, res.Err)
			}
			if old, ok := next[a]; ok && old.labels["state"] == want && old.labels != nil && hasLabel(old.labels, "state") {
				next[a] = qmKey{labels: ls}
				delete(next, b)
				changed = true
			}
			if got := res.Resp.(*dkvpb.TxnResponse).Succeeded; got != changed {
				t.Fatalf("step %d: txn succeeded=%v, model says %v", step, got, changed)
			}
		case op < 15: // revoke a lease (deleting its keys), grant it again
			id := 1 + rng.Int63n(3)
			res := h.apply(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseRevoke{LeaseRevoke: &dkvpb.LeaseRevokeRequest{Id: id}}})
			if res.Err != nil {
				t.Fatalf("step %d revoke: %v", step, res.Err)
			}
			for k, v := range next {
				if v.lease == id {
					delete(next, k)
					changed = true
				}
			}
			h.apply(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_LeaseGrant{LeaseGrant: &dkvpb.LeaseGrantRequest{Id: id, TtlMs: 60_000}}})
		case op < 16: // compact, and purge what it allows
			if cur() <= compact+1 {
				continue
			}
			c := compact + 1 + rng.Int63n(cur()-compact)
			if res := h.apply(compactReq(c)); res.Err != nil {
				t.Fatalf("step %d compact %d: %v", step, c, res.Err)
			}
			if err := h.s.PurgeHistory(h.db, c); err != nil {
				t.Fatal(err)
			}
			compact = c
		case op < 17:
			h.restart()
		case op < 18:
			h.snapshot()
		case op < 19:
			if len(idx) < 3 {
				createIndex("", "tier")
			}
		}
		if changed {
			states = append(states, next)
			if h.s.Revision() != cur() {
				t.Fatalf("step %d: store at revision %d, model at %d", step, h.s.Revision(), cur())
			}
		}
		for range 3 {
			checkQuery(t, h, rng, states, idx, compact, step)
		}
		checkIndexExact(t, h, states, max(compact, cur()-rng.Int63n(cur())), step)
	}
}

func hasLabel(ls map[string]string, n string) bool { _, ok := ls[n]; return ok }

func checkQuery(t *testing.T, h *qmHarness, rng *rand.Rand, states []map[string]qmKey, idx []qmIndex, compact int64, step int) {
	t.Helper()
	cur := int64(len(states) - 1)
	q := genQuery(rng)
	rev := int64(0)
	if rng.Intn(2) == 0 {
		rev = 1 + rng.Int63n(cur)
	}
	at := rev
	if at == 0 {
		at = cur
	}
	scan := rng.Intn(3) == 0
	pq, err := ParseQuery(q.text)
	if err != nil {
		t.Fatalf("step %d: parse %q: %v", step, q.text, err)
	}
	var want []string
	for k, v := range states[at] {
		if q.match(k, v.labels) {
			want = append(want, k)
		}
	}
	sort.Strings(want)
	limit := int64(rng.Intn(4))
	var got []string
	var token []byte
	for page := 0; ; page++ {
		res, err := h.s.Query(context.Background(), h.db, pq, QueryOptions{Revision: rev, Limit: limit, Scan: scan, Continuation: token})
		if rev != 0 && rev < compact {
			if codeOf(err) != dkverr.Compacted {
				t.Fatalf("step %d: query %q at compacted revision %d (compact %d): %v", step, q.text, rev, compact, err)
			}
			return
		}
		if !scan && !q.usable(idx, at) {
			if codeOf(err) != dkverr.NoIndex {
				t.Fatalf("step %d: query %q at %d without a usable index: got %v", step, q.text, at, err)
			}
			if !strings.Contains(err.Error(), "dkv index create") {
				t.Fatalf("step %d: refusal does not name the index to create: %v", step, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("step %d: query %q at %d (scan %v): %v", step, q.text, rev, scan, err)
		}
		if res.Revision != at {
			t.Fatalf("step %d: query read revision %d, want %d", step, res.Revision, at)
		}
		for _, kv := range res.KVs {
			got = append(got, string(kv.Key))
			if wl := states[at][string(kv.Key)].labels; fmt.Sprint(wl) != fmt.Sprint(kv.Labels) {
				t.Fatalf("step %d: %q has labels %v at %d, model %v", step, kv.Key, kv.Labels, at, wl)
			}
		}
		if !res.More {
			break
		}
		if limit == 0 || page > 100 {
			t.Fatalf("step %d: More without a limit or endless paging", step)
		}
		token = res.Continuation
		rev = res.Revision // a page after the first is at the token's revision
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("step %d: query %q at revision %d (scan %v, limit %d, compact %d):\n got %q\nwant %q",
			step, q.text, at, scan, limit, compact, got, want)
	}
}

// checkIndexExact checks that each index's entries at rev name exactly
// the keys that had each value then: no stale entry (a missing "no
// longer" record) hides behind the re-check of the key's labels.
func checkIndexExact(t *testing.T, h *qmHarness, states []map[string]qmKey, rev int64, step int) {
	t.Helper()
	ds, err := h.s.Indexes(h.db)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if d.Created > rev {
			continue
		}
		for _, v := range qmValues[d.Label] {
			var got, want []string
			term := Term{Label: d.Label, Kind: TermEq, Values: []string{v}}
			if err := h.s.indexCandidates(h.db, plan{idx: d, term: &term}, nil, rev, func(k []byte) error {
				got = append(got, string(k))
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			for k, kv := range states[rev] {
				if strings.HasPrefix(k, string(d.Prefix)) && kv.labels[d.Label] == v && hasLabel(kv.labels, d.Label) {
					want = append(want, k)
				}
			}
			sort.Strings(want)
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Fatalf("step %d: index %q/%s value %q at %d: entries %q, keys %q", step, d.Prefix, d.Label, v, rev, got, want)
			}
		}
	}
}
