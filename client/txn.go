package client

import (
	"context"
	"fmt"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"google.golang.org/grpc"
)

// CmpTarget is what a Cmp compares.
type CmpTarget int

const (
	CmpValue CmpTarget = iota
	CmpVersion
	CmpCreateRevision
	CmpModRevision
	CmpExists
	// CmpLock compares lock ownership (LockHeld, LockNotHeld).
	CmpLock
	// CmpLabel compares one of the key's labels (Label).
	CmpLabel
)

// CmpResult is how a Cmp compares.
type CmpResult int

const (
	Equal CmpResult = iota
	NotEqual
	Greater
	Less
)

var cmpResultPB = map[CmpResult]dkvpb.Compare_CompareResult{
	Equal:    dkvpb.Compare_EQUAL,
	NotEqual: dkvpb.Compare_NOT_EQUAL,
	Greater:  dkvpb.Compare_GREATER,
	Less:     dkvpb.Compare_LESS,
}

// Cmp is one condition of a transaction. Build it with Value, Version,
// CreateRevision, ModRevision, Exists or Missing. A missing key has
// version, create and mod revision 0 and no value.
type Cmp struct {
	Key    string
	Target CmpTarget
	Result CmpResult
	// Value is the operand of a CmpValue compare.
	Value []byte
	// Number is the operand of a version or revision compare.
	Number int64
	// Exists is the operand of a CmpExists compare.
	Exists bool
	// Lock is the operand of a CmpLock compare.
	Lock *LockHandle
	// Label is the label name of a CmpLabel compare; its operand is
	// Value, or with LabelPresence, Exists.
	Label         string
	LabelPresence bool
}

// ValueCmp starts a compare on a key's value.
type ValueCmp struct{ key string }

// IntCmp starts a compare on a key's version or a revision.
type IntCmp struct {
	key    string
	target CmpTarget
}

// Value compares key's value: client.Value("k").Equal([]byte("v")).
func Value(key string) ValueCmp { return ValueCmp{key} }

// Version compares key's version (0 when absent).
func Version(key string) IntCmp { return IntCmp{key, CmpVersion} }

// CreateRevision compares the revision that created key (0 when absent).
func CreateRevision(key string) IntCmp { return IntCmp{key, CmpCreateRevision} }

// ModRevision compares the revision of key's last write (0 when absent).
func ModRevision(key string) IntCmp { return IntCmp{key, CmpModRevision} }

// Exists holds when key exists.
func Exists(key string) Cmp { return Cmp{Key: key, Target: CmpExists, Exists: true} }

// Missing holds when key does not exist.
func Missing(key string) Cmp { return Cmp{Key: key, Target: CmpExists, Exists: false} }

func (v ValueCmp) cmp(r CmpResult, val []byte) Cmp {
	return Cmp{Key: v.key, Target: CmpValue, Result: r, Value: val}
}

// Equal holds when the value equals val.
func (v ValueCmp) Equal(val []byte) Cmp { return v.cmp(Equal, val) }

// NotEqual holds when the value differs from val.
func (v ValueCmp) NotEqual(val []byte) Cmp { return v.cmp(NotEqual, val) }

// Greater holds when the value sorts after val (bytewise).
func (v ValueCmp) Greater(val []byte) Cmp { return v.cmp(Greater, val) }

// Less holds when the value sorts before val (bytewise).
func (v ValueCmp) Less(val []byte) Cmp { return v.cmp(Less, val) }

func (i IntCmp) cmp(r CmpResult, n int64) Cmp {
	return Cmp{Key: i.key, Target: i.target, Result: r, Number: n}
}

// Equal holds when the field equals n.
func (i IntCmp) Equal(n int64) Cmp { return i.cmp(Equal, n) }

// NotEqual holds when the field differs from n.
func (i IntCmp) NotEqual(n int64) Cmp { return i.cmp(NotEqual, n) }

// Greater holds when the field is greater than n.
func (i IntCmp) Greater(n int64) Cmp { return i.cmp(Greater, n) }

// Less holds when the field is less than n.
func (i IntCmp) Less(n int64) Cmp { return i.cmp(Less, n) }

func (c Cmp) toPB() *dkvpb.Compare {
	pc := &dkvpb.Compare{Key: []byte(c.Key), Result: cmpResultPB[c.Result]}
	switch c.Target {
	case CmpValue:
		pc.Target = dkvpb.Compare_VALUE
		pc.TargetUnion = &dkvpb.Compare_Value{Value: c.Value}
	case CmpVersion:
		pc.Target = dkvpb.Compare_VERSION
		pc.TargetUnion = &dkvpb.Compare_Version{Version: c.Number}
	case CmpCreateRevision:
		pc.Target = dkvpb.Compare_CREATE
		pc.TargetUnion = &dkvpb.Compare_CreateRevision{CreateRevision: c.Number}
	case CmpModRevision:
		pc.Target = dkvpb.Compare_MOD
		pc.TargetUnion = &dkvpb.Compare_ModRevision{ModRevision: c.Number}
	case CmpExists:
		pc.Target = dkvpb.Compare_EXISTS
		pc.TargetUnion = &dkvpb.Compare_Exists{Exists: c.Exists}
	case CmpLock:
		pc.Target = dkvpb.Compare_LOCK
		pc.TargetUnion = &dkvpb.Compare_Lock{Lock: c.Lock.pb()}
	case CmpLabel:
		pc.Target, pc.Label = dkvpb.Compare_LABEL, c.Label
		if c.LabelPresence {
			pc.TargetUnion = &dkvpb.Compare_Exists{Exists: c.Exists}
		} else {
			pc.TargetUnion = &dkvpb.Compare_Value{Value: c.Value}
		}
	}
	return pc
}

type opType int

const (
	opGet opType = iota + 1
	opPut
	opDelete
)

// Op is one operation inside a transaction; build it with OpGet, OpPut
// or OpDelete.
type Op struct {
	typ   opType
	key   string
	value []byte
	cfg   opConfig
}

// OpGet reads key (or a range / prefix, with the same options as Range)
// inside a transaction.
func OpGet(key string, opts ...OpOption) Op { return Op{typ: opGet, key: key, cfg: buildConfig(opts)} }

// OpPut writes key inside a transaction. Conditions go in the Txn's If,
// not in IfAbsent / IfVersion options.
func OpPut(key string, value []byte, opts ...OpOption) Op {
	return Op{typ: opPut, key: key, value: value, cfg: buildConfig(opts)}
}

// OpDelete deletes key (or a range / prefix) inside a transaction.
func OpDelete(key string, opts ...OpOption) Op {
	return Op{typ: opDelete, key: key, cfg: buildConfig(opts)}
}

func (o Op) toPB() (*dkvpb.RequestOp, error) {
	switch o.typ {
	case opGet:
		r, err := o.cfg.rangeRequest(o.key)
		if err != nil {
			return nil, err
		}
		return &dkvpb.RequestOp{Request: &dkvpb.RequestOp_RequestRange{RequestRange: r}}, nil
	case opPut:
		r, err := o.cfg.putRequest(o.key, o.value)
		if err != nil {
			return nil, err
		}
		return &dkvpb.RequestOp{Request: &dkvpb.RequestOp_RequestPut{RequestPut: r}}, nil
	case opDelete:
		r, err := o.cfg.deleteRequest(o.key)
		if err != nil {
			return nil, err
		}
		return &dkvpb.RequestOp{Request: &dkvpb.RequestOp_RequestDeleteRange{RequestDeleteRange: r}}, nil
	}
	return nil, newError(ErrInvalidInput, "zero Op: build ops with OpGet, OpPut or OpDelete")
}

// Txn is a transaction under construction: the compares in If are
// evaluated atomically; if all hold, the Then ops run, otherwise the Else
// ops, all as one revision. If, Then and Else may each be called once.
type Txn struct {
	c    *Client
	ctx  context.Context
	cmps []Cmp
	then []Op
	els  []Op
	// stage is the last of If (1), Then (2), Else (3) called; each may be
	// called once, in that order.
	stage int
	err   error
}

// TxnResult is the outcome of a Txn.
type TxnResult struct {
	// Succeeded is true when every compare held and the Then ops ran.
	Succeeded bool
	// Revision is the store revision after the transaction.
	Revision int64
	// Responses holds one result per op of the branch that ran.
	Responses []OpResult
}

// OpResult is the result of one transaction op; exactly one field is set.
type OpResult struct {
	Get    *RangeResult
	Put    *PutResult
	Delete *DeleteResult
}

// Txn implements KV.
func (c *Client) Txn(ctx context.Context) *Txn { return &Txn{c: c, ctx: ctx} }

func (t *Txn) advance(stage int, name string) {
	if t.err == nil && t.stage >= stage {
		t.err = newError(ErrInvalidInput, "txn: %s called after %s", name, [...]string{"", "If", "Then", "Else"}[t.stage])
	}
	t.stage = stage
}

// If adds the compares; all must hold for Then to run.
func (t *Txn) If(cmps ...Cmp) *Txn {
	t.advance(1, "If")
	t.cmps = append(t.cmps, cmps...)
	return t
}

// Then sets the ops that run when every compare holds.
func (t *Txn) Then(ops ...Op) *Txn {
	t.advance(2, "Then")
	t.then = append(t.then, ops...)
	return t
}

// Else sets the ops that run when a compare fails.
func (t *Txn) Else(ops ...Op) *Txn {
	t.advance(3, "Else")
	t.els = append(t.els, ops...)
	return t
}

// Commit sends the transaction. A transaction of reads only is retried
// like a read; any other like a write (see ErrUnknownOutcome).
func (t *Txn) Commit() (*TxnResult, error) {
	if t.err != nil {
		return nil, t.err
	}
	req := &dkvpb.TxnRequest{}
	write := false
	for _, c := range t.cmps {
		req.Compare = append(req.Compare, c.toPB())
	}
	conv := func(ops []Op, branch string) ([]*dkvpb.RequestOp, error) {
		var out []*dkvpb.RequestOp
		for i, o := range ops {
			p, err := o.toPB()
			if err != nil {
				return nil, fmt.Errorf("txn %s op %d: %w", branch, i, err)
			}
			if o.typ != opGet {
				write = true
			}
			out = append(out, p)
		}
		return out, nil
	}
	var err error
	if req.Success, err = conv(t.then, "then"); err != nil {
		return nil, err
	}
	if req.Failure, err = conv(t.els, "else"); err != nil {
		return nil, err
	}
	var resp *dkvpb.TxnResponse
	rpc := func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = t.c.kv.Txn(ctx, req, o...)
		return err
	}
	if write {
		err = t.c.callOnce(t.ctx, rpc)
	} else {
		err = t.c.call(t.ctx, false, rpc)
	}
	if err != nil {
		return nil, err
	}
	res := &TxnResult{Succeeded: resp.GetSucceeded(), Revision: resp.GetHeader().GetRevision()}
	for _, r := range resp.GetResponses() {
		var or OpResult
		switch x := r.GetResponse().(type) {
		case *dkvpb.ResponseOp_ResponseRange:
			or.Get = rangeResult(x.ResponseRange)
		case *dkvpb.ResponseOp_ResponsePut:
			or.Put = putResult(x.ResponsePut)
		case *dkvpb.ResponseOp_ResponseDeleteRange:
			or.Delete = deleteResult(x.ResponseDeleteRange)
		}
		res.Responses = append(res.Responses, or)
	}
	return res, nil
}
