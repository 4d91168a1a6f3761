package main

import (
	"bytes"
	"slices"
	"strconv"
	"time"

	"github.com/dkv-io/dkv/internal/bench/runner"
)

// The value format and the check are dkv bench watch-fanout's
// (internal/bench/watchfanout.go), copied: that package links DKV's
// generated API, whose kv.proto clashes with etcd's in one binary.

// fanoutValue is a stamped value (runner.StampValue: send time first)
// followed by "run:writer:seq|" (run in hex), then filler.
func fanoutValue(filler []byte, run uint64, writer int, seq int64, t time.Time) []byte {
	v := runner.StampValue(nil, t)
	v = strconv.AppendUint(v, run, 16)
	v = append(v, ':')
	v = strconv.AppendInt(v, int64(writer), 10)
	v = append(v, ':')
	v = strconv.AppendInt(v, seq, 10)
	v = append(v, '|')
	if len(filler) > len(v) {
		v = append(v, filler[len(v):]...)
	}
	return v
}

// parseFanoutSeq reads the writer and sequence number fanoutValue put in
// v, if v is from run.
func parseFanoutSeq(v []byte, run uint64) (writer int, seq int64, ok bool) {
	if _, ok := runner.ParseStamp(v); !ok {
		return 0, 0, false
	}
	rest := v[runner.StampLen:]
	field := func(sep byte) (string, bool) {
		i := bytes.IndexByte(rest, sep)
		if i <= 0 {
			return "", false
		}
		f := string(rest[:i])
		rest = rest[i+1:]
		return f, true
	}
	rs, ok1 := field(':')
	ws, ok2 := field(':')
	ss, ok3 := field('|')
	if !ok1 || !ok2 || !ok3 {
		return 0, 0, false
	}
	r, err1 := strconv.ParseUint(rs, 16, 64)
	k, err2 := strconv.Atoi(ws)
	s, err3 := strconv.ParseInt(ss, 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || r != run || k < 0 || s < 1 {
		return 0, 0, false
	}
	return k, s, true
}

// seqRange is the sequence numbers lo..hi, both included.
type seqRange struct{ lo, hi int64 }

// seqCheck follows the sequence numbers one watcher receives from one
// writer. In order, each arrives once and is one more than the last. A
// number above the next expected one leaves a gap; one that later fills a
// gap arrived out of order; one already received is a duplicate. Gaps
// still open at the end hold the missing numbers.
type seqCheck struct {
	last      int64 // highest received
	gaps      []seqRange
	delivered int64 // distinct numbers received
	dups      int64
	reorders  int64
}

func (c *seqCheck) see(s int64) {
	switch {
	case s > c.last:
		if s > c.last+1 {
			c.gaps = append(c.gaps, seqRange{c.last + 1, s - 1})
		}
		c.last = s
		c.delivered++
	case s == c.last:
		c.dups++
	default:
		i := slices.IndexFunc(c.gaps, func(g seqRange) bool { return g.lo <= s && s <= g.hi })
		if i < 0 {
			c.dups++
			return
		}
		g := c.gaps[i]
		c.gaps = slices.Delete(c.gaps, i, i+1)
		if g.lo < s {
			c.gaps = append(c.gaps, seqRange{g.lo, s - 1})
		}
		if s < g.hi {
			c.gaps = append(c.gaps, seqRange{s + 1, g.hi})
		}
		c.reorders++
		c.delivered++
	}
}

// checkResult sums the watchers' checks.
type checkResult struct{ missing, dups, reorders int64 }

func (r *checkResult) add(o checkResult) {
	r.missing += o.missing
	r.dups += o.dups
	r.reorders += o.reorders
}

// checkAll sums the checks of one writer's numbers; missing counts, per
// watcher, the acknowledged numbers (acked[s]; acked[0] unused) that are
// in a gap or above the last it received. A number whose put failed is
// never missing: it may not have been applied.
func checkAll(checks []seqCheck, acked []bool) checkResult {
	upTo := make([]int64, len(acked))
	for s := 1; s < len(acked); s++ {
		upTo[s] = upTo[s-1]
		if acked[s] {
			upTo[s]++
		}
	}
	count := func(lo, hi int64) int64 {
		hi = min(hi, int64(len(acked)-1))
		if lo > hi {
			return 0
		}
		return upTo[hi] - upTo[lo-1]
	}
	var r checkResult
	for i := range checks {
		c := &checks[i]
		r.dups += c.dups
		r.reorders += c.reorders
		for _, g := range c.gaps {
			r.missing += count(g.lo, g.hi)
		}
		r.missing += count(c.last+1, int64(len(acked)-1))
	}
	return r
}
