package mvcc

import (
	"bytes"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/keyrange"
)

// Limits bounds the size of requests. The server validates proposals
// against them before proposing (package state's command registry says
// which validator each command takes).
type Limits struct {
	MaxKeyBytes   int
	MaxValueBytes int
	MaxTxnOps     int
}

// Default limits.
const (
	DefaultMaxKeyBytes   = 4096
	DefaultMaxValueBytes = 1 << 20
	DefaultMaxTxnOps     = 128
)

// EnsureDefaults fills zero fields with the defaults.
func (l *Limits) EnsureDefaults() {
	if l.MaxKeyBytes <= 0 {
		l.MaxKeyBytes = DefaultMaxKeyBytes
	}
	if l.MaxValueBytes <= 0 {
		l.MaxValueBytes = DefaultMaxValueBytes
	}
	if l.MaxTxnOps <= 0 {
		l.MaxTxnOps = DefaultMaxTxnOps
	}
}

func invalid(format string, args ...any) error {
	return dkverr.New(dkverr.InvalidInput, format, args...)
}

// CheckKey refuses a key that is empty or over l's limit; what names it
// in the message.
func CheckKey(what string, key []byte, l Limits) error { return checkKey(what, key, l) }

func checkKey(what string, key []byte, l Limits) error {
	if len(key) == 0 {
		return invalid("%s is empty", what)
	}
	if len(key) > l.MaxKeyBytes {
		return invalid("%s is %d bytes; the limit is %d", what, len(key), l.MaxKeyBytes)
	}
	return nil
}

func checkValue(what string, v []byte, l Limits) error {
	if len(v) > l.MaxValueBytes {
		return invalid("%s is %d bytes; the limit is %d (--max-value-bytes)", what, len(v), l.MaxValueBytes)
	}
	return nil
}

func checkNonNegative(what string, v int64) error {
	if v < 0 {
		return invalid("%s is %d; it must not be negative", what, v)
	}
	return nil
}

// ValidatePut checks a put request.
func ValidatePut(p *dkvpb.PutRequest, l Limits) error {
	l.EnsureDefaults()
	if p == nil {
		return invalid("put request is empty")
	}
	if err := checkKey("key", p.Key, l); err != nil {
		return err
	}
	if err := checkValue("value", p.Value, l); err != nil {
		return err
	}
	if err := checkNonNegative("lease", p.Lease); err != nil {
		return err
	}
	if err := checkNonNegative("if_version", p.IfVersion); err != nil {
		return err
	}
	if err := checkNonNegative("if_mod_revision", p.IfModRevision); err != nil {
		return err
	}
	if p.IgnoreValue && len(p.Value) > 0 {
		return invalid("value must be empty when ignore_value is set")
	}
	if p.IgnoreLease && (p.Lease != 0 || p.TtlMs != 0) {
		return invalid("lease and ttl_ms must be unset when ignore_lease is set")
	}
	if p.IgnoreLabels && len(p.Labels) > 0 {
		return invalid("labels must be empty when ignore_labels is set")
	}
	if err := ValidateLabels(p.Labels); err != nil {
		return err
	}
	if p.IfAbsent && (p.IfVersion > 0 || p.IfModRevision > 0) {
		return invalid("if_absent cannot be combined with if_version or if_mod_revision")
	}
	if err := ValidateLockHandle(p.Lock, l); err != nil {
		return err
	}
	return validateTTLPut(p)
}

// checkRange checks the key / range_end / prefix triple shared by range
// and delete requests.
func checkRange(key, rangeEnd []byte, prefix bool, l Limits) error {
	if prefix && len(rangeEnd) > 0 {
		return invalid("range_end must be empty when prefix is set")
	}
	if len(key) == 0 && !prefix && len(rangeEnd) == 0 {
		return invalid("key is empty")
	}
	if len(key) > l.MaxKeyBytes {
		return invalid("key is %d bytes; the limit is %d", len(key), l.MaxKeyBytes)
	}
	if len(rangeEnd) > l.MaxKeyBytes {
		return invalid("range_end is %d bytes; the limit is %d", len(rangeEnd), l.MaxKeyBytes)
	}
	if len(rangeEnd) > 0 && !isAllKeys(rangeEnd) && bytes.Compare(rangeEnd, key) < 0 {
		return invalid("range_end %q sorts before key %q", rangeEnd, key)
	}
	return nil
}

func isAllKeys(rangeEnd []byte) bool { return len(rangeEnd) == 1 && rangeEnd[0] == 0 }

// ValidateRange checks a range request.
func ValidateRange(r *dkvpb.RangeRequest, l Limits) error {
	l.EnsureDefaults()
	if r == nil {
		return invalid("range request is empty")
	}
	if err := checkRange(r.Key, r.RangeEnd, r.Prefix, l); err != nil {
		return err
	}
	if err := checkNonNegative("limit", r.Limit); err != nil {
		return err
	}
	if err := checkNonNegative("revision", r.Revision); err != nil {
		return err
	}
	if _, ok := dkvpb.RangeRequest_SortOrder_name[int32(r.SortOrder)]; !ok {
		return invalid("unknown sort_order %d", r.SortOrder)
	}
	if _, ok := dkvpb.RangeRequest_SortTarget_name[int32(r.SortTarget)]; !ok {
		return invalid("unknown sort_target %d", r.SortTarget)
	}
	if r.Lock != nil && r.Serializable {
		return invalid("a read under a lock handle is linearizable; it cannot be serializable")
	}
	return ValidateLockHandle(r.Lock, l)
}

// ValidateDeleteRange checks a delete request.
func ValidateDeleteRange(d *dkvpb.DeleteRangeRequest, l Limits) error {
	l.EnsureDefaults()
	if d == nil {
		return invalid("delete_range request is empty")
	}
	if err := checkRange(d.Key, d.RangeEnd, d.Prefix, l); err != nil {
		return err
	}
	if err := checkNonNegative("if_version", d.IfVersion); err != nil {
		return err
	}
	if d.IfVersion > 0 && (d.Prefix || len(d.RangeEnd) > 0) {
		return invalid("if_version applies to a single key; it cannot be used with range_end or prefix")
	}
	return ValidateLockHandle(d.Lock, l)
}

// ValidateCounter checks a counter request.
func ValidateCounter(c *dkvpb.CounterRequest, l Limits) error {
	l.EnsureDefaults()
	if c == nil {
		return invalid("counter request is empty")
	}
	if err := checkKey("key", c.Key, l); err != nil {
		return err
	}
	if err := checkNonNegative("lease", c.Lease); err != nil {
		return err
	}
	if c.Min != nil && c.Max != nil && *c.Min > *c.Max {
		return invalid("counter min %d is greater than max %d", *c.Min, *c.Max)
	}
	return ValidateLockHandle(c.Lock, l)
}

// ValidateCompact checks a compact request.
func ValidateCompact(c *dkvpb.CompactRequest) error {
	if c == nil {
		return invalid("compact request is empty")
	}
	if c.Revision <= 0 {
		return invalid("compact revision is %d; it must be positive", c.Revision)
	}
	return nil
}

// ValidateTxn checks a transaction: its size, every compare and op, and
// that no branch writes a key twice. The no-overlap rule is what lets a
// branch's conditional ops be checked against the state before the txn,
// and is what makes "put k then delete k" an error instead of a puzzle.
func ValidateTxn(t *dkvpb.TxnRequest, l Limits) error {
	l.EnsureDefaults()
	if t == nil {
		return invalid("txn request is empty")
	}
	if n := len(t.Success) + len(t.Failure); n > l.MaxTxnOps {
		return invalid("txn has %d ops; the limit is %d", n, l.MaxTxnOps)
	}
	if n := len(t.Compare); n > l.MaxTxnOps {
		return invalid("txn has %d compares; the limit is %d", n, l.MaxTxnOps)
	}
	for i, c := range t.Compare {
		if err := validateCompare(c, l); err != nil {
			return prefixErr(err, "compare %d: ", i)
		}
	}
	if err := validateBranch("success", t.Success, l); err != nil {
		return err
	}
	return validateBranch("failure", t.Failure, l)
}

func prefixErr(err error, format string, args ...any) error {
	if e, ok := err.(*dkverr.Error); ok {
		p := dkverr.New(e.Code, format, args...)
		return &dkverr.Error{Code: e.Code, Msg: p.Msg + e.Msg, Metadata: e.Metadata}
	}
	return err
}

func validateCompare(c *dkvpb.Compare, l Limits) error {
	if c == nil {
		return invalid("compare is empty")
	}
	if err := checkKey("key", c.Key, l); err != nil {
		return err
	}
	if len(c.RangeEnd) > 0 {
		if c.Target == dkvpb.Compare_EXISTS || c.Target == dkvpb.Compare_LOCK {
			return invalid("compare on %s takes no range_end", c.Target)
		}
		if err := checkKey("range_end", c.RangeEnd, l); err != nil {
			return err
		}
	}
	if _, ok := dkvpb.Compare_CompareResult_name[int32(c.Result)]; !ok {
		return invalid("unknown compare result %d", c.Result)
	}
	ok := true
	switch c.Target {
	case dkvpb.Compare_VERSION:
		_, ok = c.TargetUnion.(*dkvpb.Compare_Version)
	case dkvpb.Compare_CREATE:
		_, ok = c.TargetUnion.(*dkvpb.Compare_CreateRevision)
	case dkvpb.Compare_MOD:
		_, ok = c.TargetUnion.(*dkvpb.Compare_ModRevision)
	case dkvpb.Compare_VALUE:
		var v *dkvpb.Compare_Value
		if v, ok = c.TargetUnion.(*dkvpb.Compare_Value); ok {
			if err := checkValue("compare value", v.Value, l); err != nil {
				return err
			}
		}
	case dkvpb.Compare_LEASE:
		_, ok = c.TargetUnion.(*dkvpb.Compare_Lease)
	case dkvpb.Compare_EXISTS:
		_, ok = c.TargetUnion.(*dkvpb.Compare_Exists)
		if c.Result != dkvpb.Compare_EQUAL && c.Result != dkvpb.Compare_NOT_EQUAL {
			return invalid("compare on EXISTS takes EQUAL or NOT_EQUAL, not %s", c.Result)
		}
	case dkvpb.Compare_LABEL:
		if err := ValidateLabelName(c.Label); err != nil {
			return err
		}
		switch u := c.TargetUnion.(type) {
		case *dkvpb.Compare_Exists:
			if c.Result != dkvpb.Compare_EQUAL && c.Result != dkvpb.Compare_NOT_EQUAL {
				return invalid("compare on a label's presence takes EQUAL or NOT_EQUAL, not %s", c.Result)
			}
		case *dkvpb.Compare_Value:
			if err := ValidateLabelValue(c.Label, string(u.Value)); err != nil {
				return err
			}
		case nil:
		default:
			ok = false
		}
	case dkvpb.Compare_LOCK:
		var v *dkvpb.Compare_Lock
		if v, ok = c.TargetUnion.(*dkvpb.Compare_Lock); ok {
			if err := ValidateLockHandle(v.Lock, l); err != nil {
				return err
			}
		}
		if c.Result != dkvpb.Compare_EQUAL && c.Result != dkvpb.Compare_NOT_EQUAL {
			return invalid("compare on LOCK takes EQUAL or NOT_EQUAL, not %s", c.Result)
		}
	default:
		return invalid("unknown compare target %d", c.Target)
	}
	// An unset operand means the zero value of the target's type.
	if !ok && c.TargetUnion != nil {
		return invalid("compare on %s has an operand of the wrong type %T", c.Target, c.TargetUnion)
	}
	return nil
}

// span is a key range [start, end); end nil means unbounded; single means
// exactly start.
type span struct {
	start, end []byte
	single     bool
}

func makeSpan(key, rangeEnd []byte, prefix bool) span {
	switch {
	case prefix:
		return span{start: key, end: keyrange.PrefixEnd(key)}
	case len(rangeEnd) == 0:
		return span{start: key, single: true}
	case isAllKeys(rangeEnd):
		return span{start: key}
	default:
		return span{start: key, end: rangeEnd}
	}
}

func (s span) contains(k []byte) bool {
	if s.single {
		return bytes.Equal(k, s.start)
	}
	return bytes.Compare(k, s.start) >= 0 && (s.end == nil || bytes.Compare(k, s.end) < 0)
}

func (s span) overlaps(o span) bool {
	if s.single {
		return o.contains(s.start)
	}
	if o.single {
		return s.contains(o.start)
	}
	// [a,b) and [c,d) overlap iff a < d and c < b (nil = +inf).
	less := func(x, end []byte) bool { return end == nil || bytes.Compare(x, end) < 0 }
	return less(s.start, o.end) && less(o.start, s.end) &&
		!isEmpty(s) && !isEmpty(o)
}

func isEmpty(s span) bool { return !s.single && s.end != nil && bytes.Compare(s.start, s.end) >= 0 }

// MaxTxnDepth bounds the nesting of txns in txns: a txn may hold txns
// nested up to 16 levels below it. The server checks it on the wire
// before decoding (server/codec.go), and here again.
const MaxTxnDepth = 16

func validateBranch(name string, ops []*dkvpb.RequestOp, l Limits) error {
	ws, err := branchWrites(name, ops, l, 0)
	if err != nil {
		return err
	}
	return checkOverlaps(name, ws)
}

// write is a key a branch may put or a range it may delete, with where
// it sits: path names the op at each level of nesting and, in a nested
// txn, its branch (0 direct op, 1 success, 2 failure).
type write struct {
	sp   span
	put  bool
	cond bool // a delete with if_version
	path []pathStep
}

type pathStep struct{ op, branch int }

// exclusive reports whether a and b sit in the two branches of one
// nested txn, so never both run.
func exclusive(a, b write) bool {
	for k := 0; k < len(a.path) && k < len(b.path); k++ {
		x, y := a.path[k], b.path[k]
		if x == y {
			continue
		}
		return x.op == y.op && x.branch != 0 && y.branch != 0
	}
	return false
}

// branchWrites validates one branch and returns what it may write; a
// nested txn's writes come from both its branches.
func branchWrites(name string, ops []*dkvpb.RequestOp, l Limits, depth int) ([]write, error) {
	var ws []write
	for i, op := range ops {
		if op == nil {
			return nil, invalid("%s op %d is empty", name, i)
		}
		here := []pathStep{{op: i}}
		var err error
		switch r := op.Request.(type) {
		case *dkvpb.RequestOp_RequestRange:
			err = ValidateRange(r.RequestRange, l)
		case *dkvpb.RequestOp_RequestPut:
			if err = ValidatePut(r.RequestPut, l); err == nil {
				ws = append(ws, write{sp: span{start: r.RequestPut.Key, single: true}, put: true, path: here})
			}
		case *dkvpb.RequestOp_RequestDeleteRange:
			d := r.RequestDeleteRange
			if err = ValidateDeleteRange(d, l); err == nil {
				ws = append(ws, write{sp: makeSpan(d.Key, d.RangeEnd, d.Prefix), cond: d.IfVersion > 0, path: here})
			}
		case *dkvpb.RequestOp_RequestTxn:
			var nested []write
			if nested, err = nestedTxnWrites(r.RequestTxn, l, depth+1); err == nil {
				for _, w := range nested {
					w.path[0].op = i
					ws = append(ws, w)
				}
			}
		case nil:
			err = invalid("op has no request")
		default:
			err = invalid("unknown op %T", r)
		}
		if err != nil {
			return nil, prefixErr(err, "%s op %d: ", name, i)
		}
	}
	return ws, nil
}

// nestedTxnWrites validates a txn nested at depth and returns what its
// branches may write, each path starting with the branch (its op index
// is filled in by the caller).
func nestedTxnWrites(t *dkvpb.TxnRequest, l Limits, depth int) ([]write, error) {
	if t == nil {
		return nil, invalid("nested txn is empty")
	}
	if depth > MaxTxnDepth {
		return nil, invalid("txns are nested more than %d deep", MaxTxnDepth)
	}
	if n := len(t.Success) + len(t.Failure); n > l.MaxTxnOps {
		return nil, invalid("nested txn has %d ops; the limit is %d", n, l.MaxTxnOps)
	}
	if n := len(t.Compare); n > l.MaxTxnOps {
		return nil, invalid("nested txn has %d compares; the limit is %d", n, l.MaxTxnOps)
	}
	for i, c := range t.Compare {
		if err := validateCompare(c, l); err != nil {
			return nil, prefixErr(err, "nested txn compare %d: ", i)
		}
	}
	var out []write
	for b, ops := range [][]*dkvpb.RequestOp{t.Success, t.Failure} {
		name := [...]string{"nested success", "nested failure"}[b]
		ws, err := branchWrites(name, ops, l, depth)
		if err != nil {
			return nil, err
		}
		if err := checkOverlaps(name, ws); err != nil {
			return nil, err
		}
		for _, w := range ws {
			w.path = append([]pathStep{{branch: b + 1}}, w.path...)
			out = append(out, w)
		}
	}
	return out, nil
}

// checkOverlaps refuses a branch that may put a key twice, put and
// delete a key, or has a conditional delete overlapping another delete;
// writes in the two branches of one nested txn never both run.
func checkOverlaps(name string, ws []write) error {
	for i := range ws {
		for j := i + 1; j < len(ws); j++ {
			a, b := ws[i], ws[j]
			if !a.sp.overlaps(b.sp) || exclusive(a, b) {
				continue
			}
			switch {
			case a.put && b.put:
				return invalid("txn %s branch puts key %q twice", name, a.sp.start)
			case a.put || b.put:
				k := a.sp.start
				if b.put {
					k = b.sp.start
				}
				return invalid("txn %s branch both puts and deletes key %q", name, k)
			case a.cond || b.cond:
				return invalid("txn %s branch has a delete with if_version that overlaps another delete", name)
			}
		}
	}
	return nil
}
