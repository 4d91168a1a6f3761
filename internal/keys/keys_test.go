package keys

import (
	"bytes"
	"testing"
)

// TestLayoutIsStable pins the on-disk bytes: every data directory and
// snapshot depends on them, so a change here must be a deliberate format
// change, not an edit.
func TestLayoutIsStable(t *testing.T) {
	for _, c := range []struct {
		got  []byte
		want string
	}{
		{RaftHardState, "r/hs"}, {RaftSnapMeta, "r/snap"}, {RaftEntryPrefix, "r/e/"},
		{LocalMetaPrefix, "r/meta/"}, {SnapshotInstalling, "r/meta/installing"},
		{StateStart, "s"}, {StateEnd, "t"},
		{AppliedIndex, "s/raft/applied"}, {ConfState, "s/raft/confstate"},
		{MemberPrefix, "s/raft/members/"}, {MemberEnd, "s/raft/members0"},
		{AlarmPrefix, "s/alarm/"}, {AlarmEnd, "s/alarm0"}, {AuthState, "s/auth/state"},
		{MVCCLatestPrefix, "s/mk/"}, {MVCCHistoryPrefix, "s/mh/"}, {MVCCChangesPrefix, "s/mr/"},
		{MVCCRevision, "s/mm/rev"}, {MVCCCompact, "s/mm/compact"}, {MVCCLayout, "s/mm/layout"},
		{LeaseRecordPrefix, "s/ll/"}, {LeaseKeysPrefix, "s/lk/"}, {LeaseSeq, "s/lm/seq"},
		{LockHolderPrefix, "s/kh/"}, {LockTokenPrefix, "s/kt/"}, {LockQueuePrefix, "s/kq/"},
		{LockOwnerPrefix, "s/ko/"}, {LockLeasePrefix, "s/kl/"}, {LockSeq, "s/km/seq"},
		{LockGrantPrefix, "s/kg/"},
		{RateLimitPrefix, "s/bt/"}, {StorePrefix, "s/store/"}, {StoreEnd, "s/store0"},
		{MVCCIndexDefPrefix, "s/mx/"}, {MVCCIndexEntryPrefix, "s/mi/"}, {MVCCIndexSeq, "s/mm/idxseq"},
	} {
		if string(c.got) != c.want {
			t.Errorf("key %q, want %q", c.got, c.want)
		}
	}
}

// TestReplicatedKeysInStateSpan: a snapshot carries [StateStart,
// StateEnd); every replicated key must fall inside it and no raft key may.
func TestReplicatedKeysInStateSpan(t *testing.T) {
	in := func(k []byte) bool { return bytes.Compare(k, StateStart) >= 0 && bytes.Compare(k, StateEnd) < 0 }
	for _, k := range [][]byte{AppliedIndex, ConfState, MemberPrefix, AlarmPrefix, MVCCLatestPrefix, MVCCHistoryPrefix,
		MVCCChangesPrefix, MVCCRevision, MVCCCompact, MVCCLayout, LeaseRecordPrefix, LeaseKeysPrefix, LeaseSeq,
		LockHolderPrefix, LockTokenPrefix, LockQueuePrefix, LockOwnerPrefix, LockLeasePrefix, LockSeq,
		LockGrantPrefix, RateLimitPrefix} {
		if !in(k) {
			t.Errorf("%q is replicated but outside the state span", k)
		}
	}
	for _, k := range [][]byte{RaftHardState, RaftSnapMeta, RaftEntryPrefix, LocalMetaPrefix, SnapshotInstalling} {
		if in(k) {
			t.Errorf("%q is node-local but inside the state span", k)
		}
	}
}
