package server

import (
	"fmt"
	"sort"
	"testing"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
)

func TestDivergedDecidesByMajority(t *testing.T) {
	h := func(id uint64, kv uint64, applied, st uint64) peerHash {
		return peerHash{id: id, name: fmt.Sprintf("n%d", id), h: &dkvpb.HashKVResponse{Hash: kv, Revision: 10, AppliedIndex: applied, StateHash: st}}
	}
	ids := func(m map[uint64]string) []uint64 {
		var out []uint64
		for id := range m {
			out = append(out, id)
		}
		sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
		return out
	}
	for _, tc := range []struct {
		name    string
		hs      []peerHash
		members int
		want    []uint64
	}{
		{"all equal", []peerHash{h(1, 5, 9, 3), h(2, 5, 9, 3), h(3, 5, 9, 3)}, 3, nil},
		{"one KV hash differs", []peerHash{h(1, 5, 9, 3), h(2, 6, 9, 3), h(3, 5, 9, 3)}, 3, []uint64{2}},
		{"one lease/lock hash differs at the same index", []peerHash{h(1, 5, 9, 3), h(2, 5, 9, 3), h(3, 5, 9, 4)}, 3, []uint64{3}},
		{"lease/lock hashes at different indexes are not compared", []peerHash{h(1, 5, 9, 3), h(2, 5, 9, 3), h(3, 5, 10, 4)}, 3, nil},
		{"no majority: every member", []peerHash{h(1, 5, 9, 3), h(2, 6, 9, 3)}, 2, []uint64{1, 2}},
		{"five members, two differ", []peerHash{h(1, 5, 9, 3), h(2, 6, 9, 3), h(3, 5, 9, 3), h(4, 7, 9, 3), h(5, 5, 9, 3)}, 5, []uint64{2, 4}},
		{"two of three answer and differ: nothing yet", []peerHash{h(1, 5, 9, 3), h(2, 6, 9, 3)}, 3, nil},
		{"three answer, three hashes: every member", []peerHash{h(1, 5, 9, 3), h(2, 6, 9, 3), h(3, 7, 9, 3)}, 3, []uint64{1, 2, 3}},
		{"alone: nothing to compare", []peerHash{h(1, 5, 9, 3)}, 3, nil},
	} {
		got := ids(diverged(tc.hs, tc.members))
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: diverged %v, want %v", tc.name, got, tc.want)
		}
	}
}
