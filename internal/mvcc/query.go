package mvcc

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/keyrange"
)

// The query language (docs/data-model.md): whitespace-separated terms,
// ANDed; the word OR between terms separates alternatives (AND binds
// tighter). prefix=P (at most once, for the whole query) restricts the
// keys to those starting with P.
//
//	name=v        the label equals v;  name=v1|v2  equals one of them
//	name^=p       the label starts with p
//	name>=a name>a name<=b name<b   range (terms on one name combine)

// TermKind is a term's operator.
type TermKind int

const (
	TermEq TermKind = iota
	TermPrefix
	TermRange
)

// Term is one predicate on one label. A key without the label matches
// no term.
type Term struct {
	Label  string
	Kind   TermKind
	Values []string // TermEq: any of them
	Prefix string   // TermPrefix
	// TermRange: Lo (inclusive if LoIncl) when HasLo, Hi likewise.
	Lo, Hi         string
	HasLo, HasHi   bool
	LoIncl, HiIncl bool
}

// Query is a parsed query: keys under Prefix matching every term of at
// least one alternative.
type Query struct {
	Prefix []byte
	Alts   [][]Term
	Text   string
}

// The limits of a query's text. A query is parsed, planned and matched
// in time linear in its size, but every term is evaluated on every
// candidate key: the caps bound that work per key.
const (
	// MaxQueryBytes is the longest query text accepted.
	MaxQueryBytes = 16 << 10
	// MaxQueryTerms is the most terms a query may have, counting each
	// value of name=v1|v2 as a term (it is name=v1 OR name=v2).
	MaxQueryTerms = 256
)

// ParseQuery parses the query language.
func ParseQuery(text string) (*Query, error) {
	if len(text) > MaxQueryBytes {
		return nil, invalid("query is %d bytes; the limit is %d", len(text), MaxQueryBytes)
	}
	q := &Query{Text: text}
	var cur []Term
	// ranges indexes cur's range terms by label, so that merging a bound
	// into an earlier one does not scan the conjunction.
	ranges := map[string]int{}
	prefixSet := false
	terms := 0
	fields := strings.Fields(text)
	if len(fields) == 0 {
		return nil, invalid("query is empty")
	}
	for i, f := range fields {
		if f == "OR" {
			if len(cur) == 0 || i == len(fields)-1 {
				return nil, invalid("query %q: OR needs terms on both sides", text)
			}
			q.Alts = append(q.Alts, cur)
			cur = nil
			clear(ranges)
			continue
		}
		if p, ok := strings.CutPrefix(f, ReservedLabel+"="); ok {
			if prefixSet {
				return nil, invalid("query %q: prefix= given twice", text)
			}
			prefixSet = true
			q.Prefix = []byte(p)
			continue
		}
		t, err := parseTerm(f)
		if err != nil {
			return nil, prefixErr(err, "query %q: ", text)
		}
		terms += max(len(t.Values), 1)
		cur = mergeTerm(cur, ranges, t)
	}
	if terms > MaxQueryTerms {
		return nil, invalid("query has %d terms; the limit is %d (each value of name=v1|v2 counts)", terms, MaxQueryTerms)
	}
	if len(cur) > 0 || len(q.Alts) == 0 {
		q.Alts = append(q.Alts, cur)
	}
	return q, nil
}

func parseTerm(f string) (Term, error) {
	i := strings.IndexAny(f, "=<>^")
	if i <= 0 {
		return Term{}, invalid("term %q is not name=value, name^=prefix or a range (name>=a, name<b)", f)
	}
	name, op, rest := f[:i], "", f[i:]
	for _, o := range []string{">=", "<=", "^=", "=", ">", "<"} {
		if strings.HasPrefix(rest, o) {
			op, rest = o, rest[len(o):]
			break
		}
	}
	if op == "" {
		return Term{}, invalid("term %q has no operator (=, ^=, >=, >, <=, <)", f)
	}
	if err := ValidateLabelName(name); err != nil {
		return Term{}, err
	}
	t := Term{Label: name}
	switch op {
	case "=":
		t.Kind = TermEq
		t.Values = slices.Compact(slices.Sorted(slices.Values(strings.Split(rest, "|"))))
	case "^=":
		t.Kind, t.Prefix = TermPrefix, rest
	case ">=", ">":
		t.Kind, t.Lo, t.HasLo, t.LoIncl = TermRange, rest, true, op == ">="
	case "<=", "<":
		t.Kind, t.Hi, t.HasHi, t.HiIncl = TermRange, rest, true, op == "<="
	}
	for _, v := range append(append([]string{}, t.Values...), t.Prefix, t.Lo, t.Hi) {
		if err := ValidateLabelValue(name, v); err != nil {
			return Term{}, err
		}
	}
	return t, nil
}

// mergeTerm adds t to a conjunction, folding a range bound into an
// earlier range term on the same label; ranges maps the labels of ts's
// range terms to their positions.
func mergeTerm(ts []Term, ranges map[string]int, t Term) []Term {
	if t.Kind == TermRange {
		if i, ok := ranges[t.Label]; ok {
			o := &ts[i]
			if t.HasLo && (!o.HasLo || t.Lo > o.Lo || (t.Lo == o.Lo && !t.LoIncl)) {
				o.Lo, o.HasLo, o.LoIncl = t.Lo, true, t.LoIncl
			}
			if t.HasHi && (!o.HasHi || t.Hi < o.Hi || (t.Hi == o.Hi && !t.HiIncl)) {
				o.Hi, o.HasHi, o.HiIncl = t.Hi, true, t.HiIncl
			}
			return ts
		}
		ranges[t.Label] = len(ts)
	}
	return append(ts, t)
}

// matchValue reports whether a label value satisfies t.
func (t *Term) matchValue(v string) bool {
	switch t.Kind {
	case TermEq:
		_, ok := slices.BinarySearch(t.Values, v) // sorted by parseTerm
		return ok
	case TermPrefix:
		return strings.HasPrefix(v, t.Prefix)
	}
	if t.HasLo && (v < t.Lo || (v == t.Lo && !t.LoIncl)) {
		return false
	}
	if t.HasHi && (v > t.Hi || (v == t.Hi && !t.HiIncl)) {
		return false
	}
	return true
}

// Matches reports whether a key with these labels matches q.
func (q *Query) Matches(key []byte, labels map[string]string) bool {
	if !bytes.HasPrefix(key, q.Prefix) {
		return false
	}
	for _, alt := range q.Alts {
		ok := true
		for i := range alt {
			v, has := labels[alt[i].Label]
			if !has || !alt[i].matchValue(v) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// matchAlt reports whether a key with these encoded labels matches
// every term of alt.
func matchAlt(alt []Term, labels []byte) bool {
	for i := range alt {
		v, has := labelOf(labels, alt[i].Label)
		if !has || !alt[i].matchValue(v) {
			return false
		}
	}
	return true
}

// QueryOptions are a query's execution options.
type QueryOptions struct {
	Revision     int64  // 0: current
	Limit        int64  // 0: no limit
	OrderBy      string // "" or "key": by key; otherwise a label name
	Scan         bool   // allow a scan when no index serves an alternative
	KeysOnly     bool
	Continuation []byte
	// forceScan scans even where an index could serve (benchmarks
	// compare the two on one store).
	forceScan bool
	// visit, when set, is called for every record a query examines
	// (tests count a query's work with it).
	visit func()
}

// ErrNoIndex is the FailedPrecondition a query without a usable index
// gets: it names the index to create.
func errNoIndex(label string, prefix []byte, why string) error {
	return dkverr.New(dkverr.NoIndex,
		"no index on label %q under %q%s; create one with: dkv index create %s %s (or query with --scan)",
		label, prefix, why, shellWord(string(prefix)), label)
}

func shellWord(s string) string {
	if s == "" {
		return "''"
	}
	if strings.ContainsAny(s, " \t\n'\"\\$`*?[]{}()<>|&;#~!") {
		return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	return s
}

// plan is how one alternative is answered.
type plan struct {
	idx  IndexDef
	term *Term
	scan bool
}

// queryCheckEvery is how many records a query examines between two
// looks at its caller's context.
const queryCheckEvery = 64

// walkKey names how p reads its candidates: plans with one key share
// one walk.
func (p plan) walkKey() string {
	if p.scan {
		return "scan"
	}
	t := p.term
	var b strings.Builder
	fmt.Fprintf(&b, "%d %d %q", p.idx.ID, t.Kind, t.Label)
	switch t.Kind {
	case TermEq:
		for _, v := range t.Values {
			fmt.Fprintf(&b, " %q", v)
		}
	case TermPrefix:
		fmt.Fprintf(&b, " %q", t.Prefix)
	case TermRange:
		fmt.Fprintf(&b, " %t %t %q %t %t %q", t.HasLo, t.LoIncl, t.Lo, t.HasHi, t.HiIncl, t.Hi)
	}
	return b.String()
}

// termRank orders the usable terms by expected selectivity: equality on
// few values first, then prefix, then range.
func termRank(t *Term) int {
	switch t.Kind {
	case TermEq:
		return len(t.Values)
	case TermPrefix:
		return 1000
	}
	return 2000
}

// choosePlan picks the plan of one alternative; byLabel holds the
// indexes by label, so the cost is linear in the alternative's terms.
func choosePlan(byLabel map[string][]IndexDef, q *Query, alt []Term, rev int64, scan bool) (plan, error) {
	var best *plan
	bestRank := 0
	stale := ""
	for i := range alt {
		t := &alt[i]
		for _, d := range byLabel[t.Label] {
			if !bytes.HasPrefix(q.Prefix, d.Prefix) {
				continue
			}
			if d.Created > rev {
				stale = fmt.Sprintf(" at revision %d (the index on %q under %q was built at revision %d)", rev, d.Label, d.Prefix, d.Created)
				continue
			}
			if r := termRank(t); best == nil || r < bestRank {
				best, bestRank = &plan{idx: d, term: t}, r
			}
		}
	}
	if best != nil {
		return *best, nil
	}
	if scan {
		return plan{scan: true}, nil
	}
	if len(alt) == 0 {
		return plan{}, dkverr.New(dkverr.NoIndex, "query %q has no label term for an index to serve; query with --scan to list the prefix", q.Text)
	}
	return plan{}, errNoIndex(alt[0].Label, q.Prefix, stale)
}

// Plan describes how q would be answered at rev (for responses and
// tests), or the refusal.
func planText(ps []plan, q *Query) string {
	var parts []string
	for _, p := range ps {
		if p.scan {
			parts = append(parts, fmt.Sprintf("scan %s", shellWord(string(q.Prefix))))
		} else {
			parts = append(parts, fmt.Sprintf("index %s %s", shellWord(string(p.idx.Prefix)), p.idx.Label))
		}
	}
	return strings.Join(parts, " OR ")
}

// QueryResult is one page of a query's matches.
type QueryResult struct {
	KVs          []*dkvpb.KeyValue
	Revision     int64
	Continuation []byte // nil when there is no next page
	More         bool
	Plan         string
}

// Query runs q against r (a snapshot or the DB when nothing writes
// concurrently), reading the revisions stored in r.
func (s *Store) Query(ctx context.Context, r pebble.Reader, q *Query, o QueryOptions) (*QueryResult, error) {
	cur, comp, err := readCounters(r)
	if err != nil {
		return nil, err
	}
	var after *cursor
	if len(o.Continuation) > 0 {
		c, err := decodeCursor(o.Continuation)
		if err != nil {
			return nil, err
		}
		if c.text != q.Text || c.orderBy != o.OrderBy {
			return nil, invalid("continuation token belongs to another query or order (%q, order by %q)", c.text, c.orderBy)
		}
		if o.Revision != 0 && o.Revision != c.rev {
			return nil, invalid("continuation token is for revision %d, not %d", c.rev, o.Revision)
		}
		o.Revision, after = c.rev, c
	}
	if o.Limit < 0 {
		return nil, invalid("limit is %d; it must not be negative", o.Limit)
	}
	if o.Revision < 0 {
		return nil, invalid("revision is %d; it must not be negative", o.Revision)
	}
	if o.OrderBy != "" && o.OrderBy != "key" {
		if err := ValidateLabelName(o.OrderBy); err != nil {
			return nil, prefixErr(err, "order_by: ")
		}
	}
	if err := checkReadRevision(o.Revision, cur, comp); err != nil {
		return nil, err
	}
	rev := o.Revision
	if rev == 0 {
		rev = cur
	}
	ds, err := readIndexes(r)
	if err != nil {
		return nil, err
	}
	byLabel := map[string][]IndexDef{}
	for _, d := range ds {
		byLabel[d.Label] = append(byLabel[d.Label], d)
	}
	plans := make([]plan, len(q.Alts))
	for i, alt := range q.Alts {
		if o.forceScan {
			plans[i] = plan{scan: true}
		} else if plans[i], err = choosePlan(byLabel, q, alt, rev, o.Scan); err != nil {
			return nil, err
		}
	}
	// Alternatives answered the same way share one walk: every
	// alternative to scan one scan of the prefix, every alternative
	// served by the same term of the same index one walk of it. A key a
	// walk yields is checked against that walk's alternatives only: a key
	// matching another alternative is found by that one's walk.
	type walk struct {
		p    plan
		alts []int
	}
	var walks []*walk
	byPlan := map[string]*walk{}
	for i, p := range plans {
		k := p.walkKey()
		w := byPlan[k]
		if w == nil {
			w = &walk{p: p}
			byPlan[k] = w
			walks = append(walks, w)
		}
		w.alts = append(w.alts, i)
	}
	found := map[string]*dkvpb.KeyValue{}
	var sl slab
	examined := 0
	// keep adds key if it matches one of alts, and reports the caller's
	// context's error every queryCheckEvery records, so that a query
	// whose caller went away stops.
	keep := func(key []byte, rec *record, alts []int) error {
		if o.visit != nil {
			o.visit()
		}
		if examined++; examined%queryCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if !bytes.HasPrefix(key, q.Prefix) {
			return nil
		}
		match := false
		for _, a := range alts {
			if match = matchAlt(q.Alts[a], rec.labels); match {
				break
			}
		}
		if !match {
			return nil
		}
		kv := sl.kv()
		kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease = rec.create, rec.mod, rec.version, rec.lease
		kv.Labels = decodeLabels(rec.labels)
		if o.KeysOnly {
			kv.Key = sl.bytes(key)
		} else {
			kv.Key, kv.Value = sl.bytes2(key, rec.value)
		}
		found[string(kv.Key)] = kv
		return nil
	}
	for _, w := range walks {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var stop error
		if w.p.scan {
			err = s.scanAt(r, makeSpan(q.Prefix, nil, true), rev, cur, func(key []byte, rec *record) bool {
				if _, dup := found[string(key)]; dup {
					return true
				}
				stop = keep(key, rec, w.alts)
				return stop == nil
			})
		} else {
			err = s.indexCandidates(r, w.p, q.Prefix, rev, func(key []byte) error {
				if _, dup := found[string(key)]; dup {
					return nil
				}
				if err := s.getAt(r, key, rev, cur, func(rec *record) { stop = keep(key, rec, w.alts) }); err != nil {
					return err
				}
				return stop
			})
		}
		if err == nil {
			err = stop
		}
		if err != nil {
			return nil, err
		}
	}
	kvs := make([]*dkvpb.KeyValue, 0, len(found))
	for _, kv := range found {
		kvs = append(kvs, kv)
	}
	less := orderLess(o.OrderBy)
	sort.Slice(kvs, func(i, j int) bool { return less(kvs[i], kvs[j]) })
	if after != nil {
		i := sort.Search(len(kvs), func(i int) bool { return less(after.kv(), kvs[i]) })
		kvs = kvs[i:]
	}
	res := &QueryResult{Revision: rev, Plan: planText(plans, q)}
	if o.Limit > 0 && int64(len(kvs)) > o.Limit {
		kvs = kvs[:o.Limit]
		res.More = true
		last := kvs[len(kvs)-1]
		res.Continuation = encodeCursor(&cursor{text: q.Text, orderBy: o.OrderBy, rev: rev, key: last.Key, labels: last.Labels})
	}
	res.KVs = kvs
	return res, nil
}

// orderLess orders by key, or by a label's value then key with keys
// lacking the label last.
func orderLess(orderBy string) func(a, b *dkvpb.KeyValue) bool {
	if orderBy == "" || orderBy == "key" {
		return func(a, b *dkvpb.KeyValue) bool { return bytes.Compare(a.Key, b.Key) < 0 }
	}
	return func(a, b *dkvpb.KeyValue) bool {
		av, aok := a.Labels[orderBy]
		bv, bok := b.Labels[orderBy]
		if aok != bok {
			return aok
		}
		if av != bv {
			return av < bv
		}
		return bytes.Compare(a.Key, b.Key) < 0
	}
}

// scanAt visits the live keys of sp at rev.
func (s *Store) scanAt(r pebble.Reader, sp span, rev, cur int64, fn visitFn) error {
	if rev == cur {
		return scanLatest(r, sp, fn)
	}
	return scanHistory(r, sp, rev, fn)
}

// getAt calls fn with key's record at rev if it was live then.
func (s *Store) getAt(r pebble.Reader, key []byte, rev, cur int64, fn func(rec *record)) error {
	return s.scanAt(r, span{start: key, single: true}, rev, cur, func(_ []byte, rec *record) bool { fn(rec); return true })
}

// indexCandidates calls fn with every key under prefix that p's index
// says had a matching value of p's label at rev. Keys come in index
// order (value, then key); a key may come once per matching value.
func (s *Store) indexCandidates(r pebble.Reader, p plan, prefix []byte, rev int64, fn func(key []byte) error) error {
	t := p.term
	id := p.idx.ID
	type bounds struct{ lo, hi []byte }
	var bs []bounds
	escP := appendEscaped(nil, prefix)
	switch t.Kind {
	case TermEq:
		for _, v := range t.Values {
			start := indexValueStart(nil, id, v)
			lo := append(append([]byte{}, start...), escP...)
			var hi []byte
			if len(escP) == 0 {
				hi = keyrange.PrefixEnd(start)
			} else {
				hi = append(append([]byte{}, start...), keyrange.PrefixEnd(escP)...)
			}
			bs = append(bs, bounds{lo, hi})
		}
	case TermPrefix:
		base := binary.BigEndian.AppendUint64(append([]byte{}, prefixIndexEntry...), id)
		lo := append(append([]byte{}, base...), t.Prefix...)
		bs = append(bs, bounds{lo, keyrange.PrefixEnd(lo)})
	case TermRange:
		base := binary.BigEndian.AppendUint64(append([]byte{}, prefixIndexEntry...), id)
		lo, hi := base, keyrange.PrefixEnd(base)
		if t.HasLo {
			lo = append(append([]byte{}, base...), t.Lo...)
			if !t.LoIncl {
				lo = append(lo, 0x00, 0x02) // past every key of value Lo
			}
		}
		if t.HasHi {
			hi = append(append([]byte{}, base...), t.Hi...)
			if t.HiIncl {
				hi = append(hi, 0x00, 0x02)
			} else {
				hi = append(hi, 0x00)
			}
		}
		bs = append(bs, bounds{lo, hi})
	}
	var seek, kbuf []byte
	for _, b := range bs {
		if bytes.Compare(b.lo, b.hi) >= 0 {
			continue
		}
		it, err := r.NewIter(&pebble.IterOptions{LowerBound: b.lo, UpperBound: b.hi})
		if err != nil {
			return err
		}
		for valid := it.First(); valid; {
			k := it.Key()
			if len(k) < len(prefixIndexEntry)+8+2+2+8 {
				it.Close()
				return errCorrupt
			}
			group := append([]byte(nil), k[:len(k)-8]...)
			seek = binary.BigEndian.AppendUint64(append(seek[:0], group...), ^uint64(rev))
			if it.SeekGE(seek) {
				k = it.Key()
				if len(k) == len(group)+8 && bytes.HasPrefix(k, group) {
					v, err := it.ValueAndErr()
					if err != nil {
						it.Close()
						return err
					}
					if len(v) > 0 && v[0] == kindPut {
						key, err := groupKey(kbuf, group)
						if err != nil {
							it.Close()
							return err
						}
						kbuf = key
						if bytes.HasPrefix(key, prefix) {
							if err := fn(key); err != nil {
								it.Close()
								return err
							}
						}
					}
				}
			}
			seek = append(seek[:0], group...)
			seek[len(seek)-1] = 0x02
			valid = it.SeekGE(seek)
		}
		if err := it.Error(); err != nil {
			it.Close()
			return err
		}
		if err := it.Close(); err != nil {
			return err
		}
	}
	return nil
}

// groupKey extracts the user key from an index group
// s/mi/<id><value>\x00\x01<esc(key)>\x00\x01. The value holds no 0x00,
// so the first 0x00 ends it.
func groupKey(dst, group []byte) ([]byte, error) {
	body := group[len(prefixIndexEntry)+8 : len(group)-2]
	i := bytes.IndexByte(body, 0)
	if i < 0 || i+1 >= len(body) || body[i+1] != 0x01 {
		return nil, errBadIndexKey
	}
	return decodeEscaped(dst, body[i+2:])
}

// cursor is a continuation token's content: the query, order, revision
// and the last position returned.
type cursor struct {
	text, orderBy string
	rev           int64
	key           []byte
	labels        map[string]string
}

func (c *cursor) kv() *dkvpb.KeyValue { return &dkvpb.KeyValue{Key: c.key, Labels: c.labels} }

const cursorVersion = 1

func encodeCursor(c *cursor) []byte {
	b := []byte{cursorVersion}
	b = binary.AppendUvarint(b, uint64(c.rev))
	for _, s := range []string{c.text, c.orderBy, string(c.key)} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	if c.orderBy != "" && c.orderBy != "key" {
		v, ok := c.labels[c.orderBy]
		if ok {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	return b
}

func decodeCursor(b []byte) (*cursor, error) {
	bad := invalid("continuation token is malformed")
	if len(b) == 0 || b[0] != cursorVersion {
		return nil, bad
	}
	b = b[1:]
	rev, b, ok := uvarint(b)
	if !ok {
		return nil, bad
	}
	c := &cursor{rev: int64(rev)}
	var parts [3]string
	for i := range parts {
		var l uint64
		if l, b, ok = uvarint(b); !ok || uint64(len(b)) < l {
			return nil, bad
		}
		parts[i], b = string(b[:l]), b[l:]
	}
	c.text, c.orderBy, c.key = parts[0], parts[1], []byte(parts[2])
	if c.orderBy != "" && c.orderBy != "key" {
		if len(b) < 1 {
			return nil, bad
		}
		has := b[0] == 1
		var l uint64
		if l, b, ok = uvarint(b[1:]); !ok || uint64(len(b)) < l {
			return nil, bad
		}
		if has {
			c.labels = map[string]string{c.orderBy: string(b[:l])}
		}
	}
	return c, nil
}
