package tests

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dkv-io/dkv/internal/testutil"
	"github.com/dkv-io/dkv/server"
)

// lastLayout2Commit is the last commit of main whose build (dkv 0.2.0)
// reads the keyspace through the latest records (storage layout 2, data
// dir format 2) only: the release a cluster upgrades from to layout 3.
const lastLayout2Commit = "49a797ee64052b3d8be3d6a5b6149fd459ceb112"

// buildAtCommit builds cmd/dkv as it was at commit, from this checkout's
// git history.
func buildAtCommit(t *testing.T, commit string) string {
	t.Helper()
	src := t.TempDir()
	archive := func() ([]byte, error) {
		return exec.Command("sh", "-c", fmt.Sprintf("git -C .. archive --format=tar %s | tar -x -C %s", commit, src)).CombinedOutput()
	}
	if _, err := archive(); err != nil {
		// A shallow clone: fetch the commit from where it was cloned.
		fetch, ferr := exec.Command("git", "-C", "..", "fetch", "--quiet", "origin", commit).CombinedOutput()
		if out, err := archive(); err != nil {
			t.Fatalf("this test builds dkv as of commit %s from the checkout's git history, which must be present: %v\n%s\n(git fetch origin %s: %v %s)", commit, err, out, commit, ferr, fetch)
		}
	}
	bin := filepath.Join(t.TempDir(), "dkv-"+commit[:8])
	build := exec.Command("go", "build", "-o", bin, "./cmd/dkv")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build at %s: %v\n%s", commit, err, out)
	}
	return bin
}

// storageLayout scrapes m's /metrics for dkv_storage_layout; "" when it
// exports none (dkv 0.2) or cannot be reached.
func storageLayout(m *testutil.Member) string {
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + m.HTTPAddr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "dkv_storage_layout "); ok {
			return v
		}
	}
	return ""
}

// TestProcessStorageLayoutGate upgrades a cluster of real dkv 0.2.0
// processes (layout 2) member by member to this build. While one member
// still runs 0.2.0, the keyspace stays in layout 2 (a 0.2.0 member reads
// the latest records only, and would serve an empty keyspace without
// them); once the last member is upgraded, the leader moves the cluster
// to layout 3, every key written before reads the same on every member,
// and HashKV agrees. Then dkv 0.2.0, started on an upgraded member's data
// dir, refuses it (format 3) instead of serving nothing.
func TestProcessStorageLayoutGate(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test; skipped with -short")
	}
	old := buildAtCommit(t, lastLayout2Commit)
	cur := testutil.DKVBinary(t)
	ms := testutil.NewCluster(t, testutil.ClusterOptions{Members: 3, HTTP: true, FreshLogs: true, Kill: true,
		Args:      []string{"--log-format", "json"},
		Configure: func(m *testutil.Member) { m.Bin = old }}).Members
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	for _, m := range ms {
		waitServing(t, ctx, m)
	}

	// Data written by 0.2.0: puts, overwrites, deletes.
	want := map[string]string{}
	c := memberClient(t, ctx, ms[0])
	for i := range 60 {
		k := fmt.Sprintf("k%03d", i%40)
		v := fmt.Sprintf("v%d", i)
		if _, err := c.Put(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
		want[k] = v
	}
	for i := 0; i < 40; i += 7 {
		k := fmt.Sprintf("k%03d", i)
		if _, err := c.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
		delete(want, k)
	}

	upgrade := func(m *testutil.Member) {
		t.Helper()
		sigterm(t, m)
		m.Bin = cur
		m.Start(t)
		waitServing(t, ctx, m)
	}
	upgrade(ms[0])
	upgrade(ms[1])
	testutil.Eventually(t, 60*time.Second, "n1 and n2 publishing "+server.Version, func() bool {
		resp, err := c.MemberList(ctx)
		if err != nil {
			return false
		}
		n := 0
		for _, m := range resp.GetMembers() {
			if m.GetVersion() == server.Version {
				n++
			}
		}
		return n == 2
	})
	// A leader of this build checks the table since both published: it
	// says that n3 holds the layout back. A 0.2.0 leader would propose
	// nothing, so n3, if it leads, hands over (SIGTERM) and comes back on
	// 0.2.0.
	var l *testutil.Member
	for range 5 {
		testutil.Eventually(t, 30*time.Second, "a leader", func() bool { l = leaderOf(ctx, ms); return l != nil })
		if l != ms[2] {
			break
		}
		sigterm(t, ms[2])
		ms[2].Start(t)
		waitServing(t, ctx, ms[2])
	}
	if l == ms[2] {
		t.Fatalf("n3 (dkv 0.2.0) leads after 5 hand-overs")
	}
	testutil.Eventually(t, 30*time.Second, l.Name+" logging that n3 holds storage layout 3 back", func() bool {
		for _, rec := range jsonLogLines(t, l) {
			if strings.HasPrefix(fmt.Sprint(rec["msg"]), "storage layout 3") && rec["waiting_for"] == "n3" {
				return true
			}
		}
		return false
	})
	for _, m := range ms[:2] {
		if got := storageLayout(m); got != "2" {
			t.Fatalf("%s with n3 on dkv 0.2.0: dkv_storage_layout %q, want 2", m.Name, got)
		}
	}

	upgrade(ms[2])
	for _, m := range ms {
		testutil.Eventually(t, 60*time.Second, m.Name+" in storage layout 3", func() bool { return storageLayout(m) == "3" })
	}
	// Written in layout 3.
	for i := 40; i < 50; i++ {
		k := fmt.Sprintf("k%03d", i)
		if _, err := c.Put(ctx, k, []byte("new")); err != nil {
			t.Fatal(err)
		}
		want[k] = "new"
	}
	var rev int64
	for _, m := range ms {
		mc := memberClient(t, ctx, m)
		res, err := mc.List(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, kv := range res.KVs {
			got[kv.Key] = string(kv.Value)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s in layout 3 reads %d keys %v, want %d keys %v", m.Name, len(got), got, len(want), want)
		}
		rev = max(rev, res.Revision)
	}
	var hashes []uint64
	for _, m := range ms {
		mc := memberClient(t, ctx, m)
		var h uint64
		testutil.Eventually(t, 30*time.Second, m.Name+" HashKV at revision "+fmt.Sprint(rev), func() bool {
			resp, err := mc.HashKV(ctx, rev)
			if err != nil {
				return false
			}
			h = resp.GetHash()
			return true
		})
		hashes = append(hashes, h)
	}
	if hashes[0] != hashes[1] || hashes[1] != hashes[2] {
		t.Fatalf("HashKV at revision %d after the layout change: %v, want equal on every member", rev, hashes)
	}

	// A downgrade of one member to 0.2.0 is refused, not served empty.
	sigterm(t, ms[2])
	dctx, dcancel := context.WithTimeout(ctx, 60*time.Second)
	out, err := exec.CommandContext(dctx, old, ms[2].Args...).CombinedOutput()
	dcancel()
	if err == nil || !strings.Contains(string(out), "storage format 3") || !strings.Contains(string(out), "format 2 at most") {
		t.Fatalf("dkv 0.2.0 on a layout-3 data dir: err %v, want a refusal naming formats 3 and 2; output:\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(ms[2].Dir, "raftlog")); err != nil {
		t.Fatalf("after the refused downgrade: %v", err)
	}
}
