package chaos

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

func op(client int, call, ret int64, in Input, out Output) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Call: call, Return: ret, Input: in, Output: out}
}

func TestKVModel(t *testing.T) {
	put := func(v string) Input { return Input{Kind: OpPut, Key: "k", Value: v} }
	get := Input{Kind: OpGet, Key: "k"}
	val := func(v string) Output { return Output{Exists: true, Value: v} }
	ctr := func(d int64) Input { return Input{Kind: OpCounter, Key: "c", Delta: d, Min: 0, Max: 3} }
	for _, tc := range []struct {
		name  string
		ops   []porcupine.Operation
		legal bool
	}{
		{"read your write", []porcupine.Operation{op(0, 0, 1, put("a"), Output{}), op(1, 2, 3, get, val("a"))}, true},
		{"stale read after ack", []porcupine.Operation{
			op(0, 0, 1, put("a"), Output{}), op(0, 2, 3, put("b"), Output{}), op(1, 4, 5, get, val("a"))}, false},
		{"concurrent read may see either", []porcupine.Operation{
			op(0, 0, 1, put("a"), Output{}), op(0, 2, 6, put("b"), Output{}), op(1, 3, 4, get, val("a"))}, true},
		{"unknown write may apply late", []porcupine.Operation{
			op(0, 0, 100, put("a"), Output{Unknown: true}), op(1, 5, 6, get, Output{}), op(1, 7, 8, get, val("a"))}, true},
		{"unknown write may never apply", []porcupine.Operation{
			op(0, 0, 100, put("a"), Output{Unknown: true}), op(1, 5, 6, get, Output{})}, true},
		{"read of a value never written", []porcupine.Operation{op(1, 0, 1, get, val("z"))}, false},
		{"delete reports what it removed", []porcupine.Operation{
			op(0, 0, 1, put("a"), Output{}), op(0, 2, 3, Input{Kind: OpDelete, Key: "k"}, Output{Deleted: 0})}, false},
		{"cas on the current value succeeds", []porcupine.Operation{
			op(0, 0, 1, put("a"), Output{}), op(0, 2, 3, Input{Kind: OpCAS, Key: "k", Expect: "a", Value: "b"}, Output{OK: true}),
			op(0, 4, 5, get, val("b"))}, true},
		{"cas on a stale value cannot succeed", []porcupine.Operation{
			op(0, 0, 1, put("a"), Output{}), op(0, 2, 3, Input{Kind: OpCAS, Key: "k", Expect: "x", Value: "b"}, Output{OK: true})}, false},
		{"counter within bounds", []porcupine.Operation{
			op(0, 0, 1, ctr(2), Output{OK: true, Value: "2"}), op(0, 2, 3, ctr(2), Output{}), op(0, 4, 5, ctr(-1), Output{OK: true, Value: "1"})}, true},
		{"counter crossing its bound", []porcupine.Operation{
			op(0, 0, 1, ctr(2), Output{OK: true, Value: "2"}), op(0, 2, 3, ctr(2), Output{OK: true, Value: "4"})}, false},
	} {
		got := porcupine.CheckOperations(KVModel, tc.ops)
		if got != tc.legal {
			t.Errorf("%s: linearizable = %v, want %v", tc.name, got, tc.legal)
		}
	}
}

func TestScheduleIsAFunctionOfTheSeed(t *testing.T) {
	kinds := []string{"a", "b", "c"}
	a, b := Schedule(42, time.Minute, kinds), Schedule(42, time.Minute, kinds)
	if len(a) == 0 || len(a) != len(b) {
		t.Fatalf("schedules of one seed differ in length: %d, %d", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("fault %d differs: %v vs %v", i, a[i], b[i])
		}
	}
	if c := Schedule(43, time.Minute, kinds); len(c) == len(a) && c[0] == a[0] {
		t.Fatalf("seeds 42 and 43 gave the same first fault %v", a[0])
	}
}
