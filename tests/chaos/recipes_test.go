package chaos

import (
	"strings"
	"testing"
)

// TestSessionViolation: the checker accepts exact counts (and unknown
// outcomes either way) and reports a lost and a doubled increment.
func TestSessionViolation(t *testing.T) {
	ok := []SessionIncr{{Worker: 0, Outcome: "ok", Value: 1}, {Worker: 1, Outcome: "ok", Value: 2}, {Worker: 2, Outcome: "unknown"}, {Worker: 0, Outcome: "failed"}}
	for _, final := range []int{2, 3} {
		if msg := SessionViolation(ok, final); msg != "" {
			t.Fatalf("final %d reported: %s", final, msg)
		}
	}
	if msg := SessionViolation(ok, 4); !strings.Contains(msg, "applied twice") {
		t.Fatalf("a doubled increment: %q", msg)
	}
	lost := append(ok, SessionIncr{Worker: 2, Outcome: "ok", Value: 2})
	if msg := SessionViolation(lost, 3); !strings.Contains(msg, "both wrote count 2") {
		t.Fatalf("two Updates writing one count: %q", msg)
	}
	if msg := SessionViolation(ok[:2], 1); !strings.Contains(msg, "wrote count 2, but the final count is 1") {
		t.Fatalf("a final count below an acknowledged one: %q", msg)
	}
}

// TestCacheReplay: handler calls that replay cleanly pass; a repeated
// add, a missed delete and a repeated update are reported; calls that
// skip a change of the history are reported.
func TestCacheReplay(t *testing.T) {
	a1 := CacheKV{Key: "p/a", Value: "1", Mod: 2}
	a2 := CacheKV{Key: "p/a", Value: "2", Mod: 5}
	b1 := CacheKV{Key: "p/b", Value: "1", Mod: 3}
	good := []CacheCall{{Kind: "add", KV: a1}, {Kind: "add", KV: b1}, {Kind: "update", Old: a1, KV: a2}, {Kind: "delete", Old: b1}}
	m, msg := replayCacheCalls(good)
	if msg != "" || len(m) != 1 || m["p/a"] != a2 {
		t.Fatalf("good calls: %v, %q", m, msg)
	}
	for name, calls := range map[string][]CacheCall{
		"repeated add":    {{Kind: "add", KV: a1}, {Kind: "add", KV: a1}},
		"missed update":   {{Kind: "add", KV: a1}, {Kind: "delete", Old: a2}},
		"repeated update": {{Kind: "add", KV: a1}, {Kind: "update", Old: a1, KV: a2}, {Kind: "update", Old: a1, KV: a2}},
	} {
		if _, msg := replayCacheCalls(calls); msg == "" {
			t.Fatalf("%s not reported", name)
		}
	}
	h := CacheHistory{Complete: true, Events: []CacheEvent{{Rev: 2, KV: a1}, {Rev: 3, KV: b1}, {Rev: 5, KV: a2}, {Rev: 6, Delete: true, KV: CacheKV{Key: "p/b"}}}}
	// A cache whose snapshot at revision 2 held a1.
	snap := map[string]CacheKV{"p/a": a1}
	if msg := cacheCallsMatchHistory(good[1:], snap, h, 2); msg != "" {
		t.Fatalf("calls matching the history reported: %s", msg)
	}
	skipped := []CacheCall{good[1], good[3]}
	if msg := cacheCallsMatchHistory(skipped, map[string]CacheKV{"p/a": a1}, h, 2); !strings.Contains(msg, "history's change is put p/a=2@5") {
		t.Fatalf("a skipped change: %q", msg)
	}
}
