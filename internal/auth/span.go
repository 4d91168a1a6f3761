// Package auth is the pure part of DKV's authorization: key spans, the
// question "does the union of a user's permissions cover this span?",
// and an immutable view of the replicated auth state that answers it for
// every request without a raft round or a disk read. It knows nothing of
// raft, gRPC or Pebble.
package auth

import (
	"bytes"
	"fmt"
	"sort"

	"github.com/dkv-io/dkv/internal/keyrange"
)

// Span is the half-open key interval [Start, End); End == nil means no
// upper bound (every key >= Start).
type Span struct {
	Start []byte
	End   []byte
}

// SpanOf is the span a request selects, with RangeRequest's conventions:
// key alone is one key; range_end "\x00" is every key >= key; prefix is
// every key starting with key (the empty prefix: every key); otherwise
// [key, range_end). A range_end not above key selects nothing in the store
// but is treated as the one key, so a malformed range never reads as
// "nothing to check".
func SpanOf(key, rangeEnd []byte, prefix bool) Span {
	switch {
	case prefix:
		return Span{Start: key, End: keyrange.PrefixEnd(key)}
	case len(rangeEnd) == 1 && rangeEnd[0] == 0:
		return Span{Start: key}
	case len(rangeEnd) == 0 || bytes.Compare(rangeEnd, key) <= 0:
		return Key(key)
	}
	return Span{Start: key, End: rangeEnd}
}

// Key is the span of exactly one key.
func Key(k []byte) Span {
	end := make([]byte, len(k)+1)
	copy(end, k)
	return Span{Start: k, End: end}
}

// All is every key.
var All = Span{Start: []byte{}}

func (s Span) String() string {
	switch {
	case s.End == nil:
		return fmt.Sprintf("every key >= %q", s.Start)
	case len(s.End) == len(s.Start)+1 && s.End[len(s.End)-1] == 0 && bytes.HasPrefix(s.End, s.Start):
		return fmt.Sprintf("key %q", s.Start)
	}
	if pe := keyrange.PrefixEnd(s.Start); pe != nil && bytes.Equal(pe, s.End) {
		return fmt.Sprintf("prefix %q", s.Start)
	}
	return fmt.Sprintf("range [%q, %q)", s.Start, s.End)
}

// endAfter reports whether end a lies beyond end b (nil is +infinity).
func endAfter(a, b []byte) bool {
	switch {
	case a == nil:
		return b != nil
	case b == nil:
		return false
	}
	return bytes.Compare(a, b) > 0
}

// Merge returns spans sorted by start with overlapping or touching spans
// joined, so that Covers is one binary search.
func Merge(spans []Span) []Span {
	in := append([]Span(nil), spans...)
	sort.Slice(in, func(i, j int) bool { return bytes.Compare(in[i].Start, in[j].Start) < 0 })
	var out []Span
	for _, s := range in {
		if s.End != nil && bytes.Compare(s.End, s.Start) <= 0 {
			continue // empty
		}
		if n := len(out); n > 0 && (out[n-1].End == nil || bytes.Compare(s.Start, out[n-1].End) <= 0) {
			if endAfter(s.End, out[n-1].End) {
				out[n-1].End = s.End
			}
			continue
		}
		out = append(out, s)
	}
	return out
}

// Covers reports whether the union of merged (the output of Merge) holds
// every key of want. An open-ended want is covered only by an open-ended
// span.
func Covers(merged []Span, want Span) bool {
	// The last span starting at or before want.Start is the only candidate:
	// merged spans neither overlap nor touch.
	i := sort.Search(len(merged), func(i int) bool { return bytes.Compare(merged[i].Start, want.Start) > 0 }) - 1
	if i < 0 {
		return false
	}
	s := merged[i]
	if s.End != nil && bytes.Compare(s.End, want.Start) <= 0 {
		return false
	}
	return !endAfter(want.End, s.End)
}
