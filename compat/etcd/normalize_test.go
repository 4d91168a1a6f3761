package etcdcompat

import "testing"

// TestNormalizeOutput pins the normalization the etcdctl comparison relies
// on, so that a change to it that would hide a real difference (or invent
// one) shows here first.
func TestNormalizeOutput(t *testing.T) {
	names := map[string]string{
		"127.0.0.5:2379":   "<ep:n1>",
		"127.0.0.5:2380":   "<peer:n1>",
		"8e9e05c52164694d": "<id:n1>",
		"#12":              "<L1>",
		"#99":              "<cluster>",
		"/tmp/x":           "<tmp>",
	}
	for _, tc := range []struct {
		name, in, want string
		st             step
	}{
		{"addresses and ids", "8e9e05c52164694d, started, n1, http://127.0.0.5:2380, http://127.0.0.5:2379, false\n",
			"<id:n1>, started, n1, http://<peer:n1>, http://<ep:n1>, false\n", step{}},
		{"whole words only", "lease 8e9e05c52164694d granted; 8e9e05c52164694da\n", "lease <id:n1> granted; 8e9e05c52164694da\n", step{}},
		{"decimal ids in id fields only", `{"header":{"cluster_id":99,"revision":12},"lease":12}` + "\n" + `"Lease" : 12` + "\n12\n",
			`{"header":{"cluster_id":<cluster>,"revision":12},"lease":<L1>}` + "\n" + `"Lease" : <L1>` + "\n12\n", step{}},
		{"a path", "Snapshot saved at /tmp/x/snap.db\n", "Snapshot saved at <tmp>/snap.db\n", step{}},
		{"raft term", `{"revision":7,"raft_term":3}`, `{"revision":7,"raft_term":<raft_term>}`, step{}},
		{"revisions are kept", `"Revision" : 24` + "\n" + `"RaftTerm" : 2`, `"Revision" : 24` + "\n" + `"RaftTerm" : <raft_term>`, step{}},
		{"zap line", `{"level":"warn","ts":"2026-12-01T18:31:38.378Z","caller":"x","target":"endpoint://client-42a1fa5b-e06b/127.0.0.5:2379","error":"rpc error: code = OutOfRange"}`,
			`{"level":"warn","caller":"x","target":"endpoint://client-<uuid>/<ep:n1>","error":"rpc error: code = OutOfRange"}`, step{}},
		{"%16x padding", "Member  8e9e05c52164694d added to cluster  8e9e05c52164694d\n", "Member <id:n1> added to cluster <id:n1>\n", step{}},
		{"sorted lines", "b\na\n", "a\nb\n", step{sortLines: true}},
		{"nothing to sort", "", "", step{sortLines: true}},
		{"step rule", "lease 8e9e05c52164694d granted with TTL(60s), remaining(59s)\n", "lease <id:n1> granted with TTL(60s), remaining(<ttl>s)\n",
			step{rules: [][2]string{{`remaining\(\d+s\)`, `remaining(<ttl>s)`}}}},
		{"attached keys", "attached keys([leased2 leased])\n", "attached keys([leased leased2])\n", step{fix: sortAttachedKeys}},
		{"initial cluster", `ETCD_INITIAL_CLUSTER="n2=http://b,n1=http://a"`, `ETCD_INITIAL_CLUSTER="n1=http://a,n2=http://b"`, step{fix: sortInitialCluster}},
	} {
		if got := normalizeOutput(tc.in, names, tc.st); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}
