package main

import (
	"testing"
	"time"
)

func TestFanoutValueRoundTrip(t *testing.T) {
	filler := make([]byte, 256)
	v := fanoutValue(filler, 0xabc, 3, 42, time.Now())
	if len(v) != 256 {
		t.Fatalf("value is %d bytes, want 256", len(v))
	}
	k, s, ok := parseFanoutSeq(v, 0xabc)
	if !ok || k != 3 || s != 42 {
		t.Fatalf("parsed %d, %d, %v; want 3, 42, true", k, s, ok)
	}
	if _, _, ok := parseFanoutSeq(v, 0xabd); ok {
		t.Fatal("another run's value parsed as this run's")
	}
}

func TestSeqCheck(t *testing.T) {
	acked := []bool{false, true, true, true, false, true, true} // 4 failed
	var inOrder, gapped, dup, reordered seqCheck
	for _, s := range []int64{1, 2, 3, 5, 6} {
		inOrder.see(s)
	}
	for _, s := range []int64{1, 3, 6} {
		gapped.see(s)
	}
	for _, s := range []int64{1, 2, 2, 3, 5, 6} {
		dup.see(s)
	}
	for _, s := range []int64{1, 3, 2, 5, 6} {
		reordered.see(s)
	}
	for name, c := range map[string]struct {
		c    seqCheck
		want checkResult
	}{
		"in order":  {inOrder, checkResult{}},
		"gapped":    {gapped, checkResult{missing: 2}}, // 2 and 5; 4 was not acked
		"duplicate": {dup, checkResult{dups: 1}},
		"reordered": {reordered, checkResult{reorders: 1}},
	} {
		if got := checkAll([]seqCheck{c.c}, acked); got != c.want {
			t.Errorf("%s: %+v, want %+v", name, got, c.want)
		}
	}
}
