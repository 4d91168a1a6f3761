package chaos

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/anishathalye/porcupine"
)

// keyState is one key's state in the model: what a linearizable read
// would return.
type keyState struct {
	Exists bool
	Value  string
}

func (s keyState) counter() int64 {
	if !s.Exists {
		return 0
	}
	n, _ := strconv.ParseInt(s.Value, 10, 64)
	return n
}

// KVModel is DKV's KV semantics for one key (the history is partitioned
// per key): put overwrites, delete removes, a CAS applies only if its
// compare holds, a counter add applies only if the result stays within
// its bounds, a get returns the current state.
var KVModel = porcupine.Model{
	Partition: partitionByKey,
	Init:      func() any { return keyState{} },
	Step: func(state, input, output any) (bool, any) {
		return step(state.(keyState), input.(Input), output.(Output))
	},
	DescribeOperation: describeOp,
	DescribeState: func(state any) string {
		s := state.(keyState)
		if !s.Exists {
			return "(absent)"
		}
		return strconv.Quote(s.Value)
	},
}

func step(s keyState, in Input, out Output) (bool, keyState) {
	switch in.Kind {
	case OpGet:
		return out.Exists == s.Exists && (!s.Exists || out.Value == s.Value), s
	case OpPut:
		return true, keyState{true, in.Value}
	case OpDelete:
		if out.Unknown {
			return true, keyState{}
		}
		want := int64(0)
		if s.Exists {
			want = 1
		}
		return out.Deleted == want, keyState{}
	case OpCAS:
		cond := !s.Exists
		if !in.ExpectAbsent {
			cond = s.Exists && s.Value == in.Expect
		}
		next := s
		if cond {
			next = keyState{true, in.Value}
		}
		return out.Unknown || out.OK == cond, next
	case OpCounter:
		n := s.counter() + in.Delta
		inBounds := n >= in.Min && n <= in.Max
		next := s
		if inBounds {
			next = keyState{true, strconv.FormatInt(n, 10)}
		}
		if out.Unknown {
			return true, next
		}
		return out.OK == inBounds && (!inBounds || out.Value == next.Value), next
	}
	return false, s
}

func partitionByKey(history []porcupine.Operation) [][]porcupine.Operation {
	byKey := map[string][]porcupine.Operation{}
	for _, op := range history {
		k := op.Input.(Input).Key
		byKey[k] = append(byKey[k], op)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([][]porcupine.Operation, 0, len(keys))
	for _, k := range keys {
		out = append(out, byKey[k])
	}
	return out
}

func describeOp(input, output any) string {
	in, out := input.(Input), output.(Output)
	res := ""
	switch in.Kind {
	case OpGet:
		res = "absent"
		if out.Exists {
			res = strconv.Quote(out.Value)
		}
		return fmt.Sprintf("get(%s) -> %s", in.Key, res)
	case OpPut:
		res = "ok"
	case OpDelete:
		res = fmt.Sprintf("deleted %d", out.Deleted)
	case OpCAS:
		res = fmt.Sprintf("succeeded=%v", out.OK)
	case OpCounter:
		res = "conflict"
		if out.OK {
			res = out.Value
		}
	}
	if out.Unknown {
		res = "unknown"
	}
	switch in.Kind {
	case OpPut:
		return fmt.Sprintf("put(%s, %q) -> %s", in.Key, in.Value, res)
	case OpDelete:
		return fmt.Sprintf("delete(%s) -> %s", in.Key, res)
	case OpCAS:
		exp := strconv.Quote(in.Expect)
		if in.ExpectAbsent {
			exp = "absent"
		}
		return fmt.Sprintf("cas(%s, %s -> %q) -> %s", in.Key, exp, in.Value, res)
	default:
		return fmt.Sprintf("counter(%s, %+d in [%d,%d]) -> %s", in.Key, in.Delta, in.Min, in.Max, res)
	}
}
