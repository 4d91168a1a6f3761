package etcdcompat

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/dkv-io/dkv/internal/testutil"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// snapKeys is how many keys the round trip writes.
const snapKeys = 100_000

// TestSnapshotRoundTrip moves a store from etcd to DKV and back with the
// commands docs/etcd-compat.md ("Moving from etcd") gives: Debian's etcd
// 3.4 gets 100k keys (written in txns of 128), three leases with keys
// attached, overwrites, deletes, keys deleted and created again, a
// compaction in the middle of that history and more history after it;
// `etcdctl snapshot save` of it is restored into DKV with `dkv snapshot
// restore --from-etcd`; `etcdctl snapshot save` of that DKV (etcd's
// format, through DKV's etcd API) passes `etcdctl snapshot status` and
// is restored with `etcdctl snapshot restore` into a new etcd. On DKV
// and on the last etcd, every key's value, create and mod revision,
// version and lease equals the first etcd's, at the current revision and
// at a past one; the store revision and the compact revision are kept
// (a read below it is refused as compacted); a watch resuming from a
// revision after the compaction sees the same events; the leases are
// there with their TTL and keys.
//
// It needs Debian's etcd and etcdctl; it skips without them, except with
// CI=true, where it fails. It does not depend on -target: it starts one
// etcd and one DKV of its own (.ci/run runs it in the dkv pass only).
func TestSnapshotRoundTrip(t *testing.T) {
	for _, bin := range []string{*etcdBin, *etcdctlBin} {
		if _, err := os.Stat(bin); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%v: this test needs Debian's etcd-server and etcd-client (.ci/run installs them)", err)
			}
			t.Skipf("%v: this test needs Debian's etcd-server and etcd-client", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	base := t.TempDir()

	// 1. The source etcd and its data.
	src := startOneEtcd(t, base, "src", "")
	cli := oneClient(t, src.ClientAddr)
	hist := writeHistory(ctx, t, cli)
	want := dumpAll(ctx, t, cli, 0)
	wantPast := dumpAll(ctx, t, cli, hist.past)
	wantEvents := watchEvents(ctx, t, cli, hist.watchFrom, hist.last)
	wantLeases := leaseState(ctx, t, cli)
	if int64(len(want)) != hist.live {
		t.Fatalf("the source etcd holds %d keys, the writer counted %d", len(want), hist.live)
	}
	t.Logf("source etcd: revision %d, compacted at %d, %d live keys, %d watch events from %d", hist.last, hist.compact, len(want), len(wantEvents), hist.watchFrom)

	// 2. etcd -> DKV.
	etcdFile := filepath.Join(base, "etcd.db")
	etcdctl(ctx, t, "--endpoints", src.ClientAddr, "snapshot", "save", etcdFile)
	src.Stop()
	dkv := &testutil.Member{Name: "n1", ClientAddr: testutil.FreeAddr(t), PeerAddr: testutil.FreeAddr(t),
		Dir: filepath.Join(base, "dkv"), Log: filepath.Join(base, "dkv.log")}
	initial := "n1=" + dkv.PeerAddr
	out, err := exec.CommandContext(ctx, testutil.DKVBinary(t), "snapshot", "restore", "--from-etcd", etcdFile,
		"--data-dir", dkv.Dir, "--name", "n1", "--initial-cluster", initial).CombinedOutput()
	if err != nil {
		t.Fatalf("dkv snapshot restore --from-etcd: %v\n%s", err, out)
	}
	t.Logf("dkv snapshot restore --from-etcd:\n%s", out)
	dkv.Args = []string{"serve", "--name", "n1", "--data-dir", dkv.Dir, "--client-addr", dkv.ClientAddr,
		"--peer-addr", dkv.PeerAddr, "--http-addr", "", "--initial-cluster", initial}
	dkv.Start(t)
	t.Cleanup(dkv.Stop)
	dcli := oneClient(t, dkv.ClientAddr)
	waitServing(ctx, t, dcli, dkv)
	compare(ctx, t, "DKV restored from etcd", dcli, hist, want, wantPast, wantEvents, wantLeases)

	// 3. DKV -> etcd.
	dkvFile := filepath.Join(base, "dkv.db")
	etcdctl(ctx, t, "--endpoints", dkv.ClientAddr, "snapshot", "save", dkvFile)
	status := etcdctl(ctx, t, "snapshot", "status", dkvFile, "-w", "json")
	if !strings.Contains(status, fmt.Sprintf(`"revision":%d`, hist.last)) {
		t.Errorf("etcdctl snapshot status of DKV's snapshot: %s, want revision %d", status, hist.last)
	}
	dkv.Stop()
	back := filepath.Join(base, "back")
	peer := testutil.FreeAddr(t)
	etcdctl(ctx, t, "snapshot", "restore", dkvFile, "--data-dir", back, "--name", "back",
		"--initial-cluster", "back=http://"+peer, "--initial-advertise-peer-urls", "http://"+peer)
	dst := startOneEtcd(t, base, "back", peer)
	ecli := oneClient(t, dst.ClientAddr)
	compare(ctx, t, "etcd restored from DKV", ecli, hist, want, wantPast, wantEvents, wantLeases)
}

// history is what writeHistory did.
type history struct {
	compact   int64 // the compaction's revision
	past      int64 // a revision after it, before the last writes
	watchFrom int64 // where the watch resumes
	last      int64 // the store revision at the end
	live      int64 // keys live at the end
	leases    []clientv3.LeaseID
}

// writeHistory writes snapKeys keys in txns of 128, some on leases, then
// overwrites, deletes and re-creates, compacts, and writes more.
func writeHistory(ctx context.Context, t *testing.T, cli *clientv3.Client) history {
	var h history
	for _, ttl := range []int64{3600, 7200, 86400} {
		g, err := cli.Grant(ctx, ttl)
		if err != nil {
			t.Fatal(err)
		}
		h.leases = append(h.leases, g.ID)
	}
	key := func(i int) string { return fmt.Sprintf("k/%06d", i) }
	batch := func(what string, from, to, step int, op func(i int) clientv3.Op) {
		t.Helper()
		var ops []clientv3.Op
		flush := func() {
			if len(ops) == 0 {
				return
			}
			if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			ops = ops[:0]
		}
		for i := from; i < to; i += step {
			ops = append(ops, op(i))
			if len(ops) == 128 {
				flush()
			}
		}
		flush()
	}
	batch("create", 0, snapKeys, 1, func(i int) clientv3.Op {
		v := fmt.Sprintf("v1-%d-%s", i, strings.Repeat("x", i%40))
		if i%100 < 3 {
			return clientv3.OpPut(key(i), v, clientv3.WithLease(h.leases[i%100]))
		}
		return clientv3.OpPut(key(i), v)
	})
	batch("overwrite", 0, snapKeys, 7, func(i int) clientv3.Op { return clientv3.OpPut(key(i), fmt.Sprintf("v2-%d", i)) })
	batch("delete", 1, snapKeys, 11, func(i int) clientv3.Op { return clientv3.OpDelete(key(i)) })
	// Single writes too: one revision each.
	for i := 5; i < 500; i += 50 {
		if _, err := cli.Put(ctx, key(i), fmt.Sprintf("v3-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	r, err := cli.Get(ctx, "k/")
	if err != nil {
		t.Fatal(err)
	}
	h.compact = r.Header.Revision - 20
	if _, err := cli.Compact(ctx, h.compact, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	h.watchFrom = r.Header.Revision - 5
	// After the compaction: overwrites, deletes, keys deleted before
	// created again (version 1, a new create revision), a delete of a
	// leased key.
	batch("overwrite after compaction", 3, snapKeys, 13, func(i int) clientv3.Op { return clientv3.OpPut(key(i), fmt.Sprintf("v4-%d", i)) })
	batch("re-create", 1, 3000, 11, func(i int) clientv3.Op { return clientv3.OpPut(key(i), fmt.Sprintf("v5-%d", i)) })
	p, err := cli.Put(ctx, "past-marker", "x")
	if err != nil {
		t.Fatal(err)
	}
	h.past = p.Header.Revision
	batch("delete after compaction", 2, snapKeys, 17, func(i int) clientv3.Op { return clientv3.OpDelete(key(i)) })
	for i := 0; i < 300; i += 100 { // leased keys, deleted one by one
		if _, err := cli.Delete(ctx, key(i)); err != nil {
			t.Fatalf("delete %s: %v", key(i), err)
		}
	}
	last, err := cli.Put(ctx, "k/", "last")
	if err != nil {
		t.Fatal(err)
	}
	h.last = last.Header.Revision
	c, err := cli.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	h.live = c.Count
	return h
}

// kvState is what is compared of a key.
type kvState struct {
	value                string
	create, mod, version int64
	lease                int64
}

// dumpAll reads every key at rev (0: the current one), in pages.
func dumpAll(ctx context.Context, t *testing.T, cli *clientv3.Client, rev int64) map[string]kvState {
	t.Helper()
	out := map[string]kvState{}
	from := "\x00"
	for {
		opts := []clientv3.OpOption{clientv3.WithRange("\x00"), clientv3.WithLimit(20000), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		r, err := cli.Get(ctx, from, opts...)
		if err != nil {
			t.Fatalf("range at %d from %q: %v", rev, from, err)
		}
		for _, kv := range r.Kvs {
			out[string(kv.Key)] = kvState{string(kv.Value), kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease}
		}
		if !r.More || len(r.Kvs) == 0 {
			return out
		}
		if rev == 0 {
			rev = r.Header.Revision // the later pages at the first's revision
		}
		from = string(r.Kvs[len(r.Kvs)-1].Key) + "\x00"
	}
}

// event is what is compared of a watch event.
type event struct {
	typ                  mvccpb.Event_EventType
	key, value           string
	create, mod, version int64
}

// watchEvents watches every key from rev until it has seen revision
// last.
func watchEvents(ctx context.Context, t *testing.T, cli *clientv3.Client, rev, last int64) []event {
	t.Helper()
	// A watch missing the last revision fails within a minute instead of
	// waiting for the test's deadline.
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var out []event
	for wr := range cli.Watch(wctx, "\x00", clientv3.WithRange("\x00"), clientv3.WithRev(rev)) {
		if err := wr.Err(); err != nil {
			t.Fatalf("watch from %d: %v", rev, err)
		}
		for _, e := range wr.Events {
			out = append(out, event{e.Type, string(e.Kv.Key), string(e.Kv.Value), e.Kv.CreateRevision, e.Kv.ModRevision, e.Kv.Version})
			if e.Kv.ModRevision == last {
				return out
			}
		}
	}
	t.Fatalf("watch from %d ended before revision %d (%d events): %v", rev, last, len(out), wctx.Err())
	return nil
}

// leaseState is every lease's granted TTL and attached keys.
func leaseState(ctx context.Context, t *testing.T, cli *clientv3.Client) map[clientv3.LeaseID]string {
	t.Helper()
	ls, err := cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[clientv3.LeaseID]string{}
	for _, l := range ls.Leases {
		ttl, err := cli.TimeToLive(ctx, l.ID, clientv3.WithAttachedKeys())
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, k := range ttl.Keys {
			keys = append(keys, string(k))
		}
		sort.Strings(keys)
		h := fnv.New64a()
		for _, k := range keys {
			h.Write([]byte(k + "\x00"))
		}
		if len(keys) > 3 {
			keys = append(keys[:3], "...")
		}
		out[l.ID] = fmt.Sprintf("granted %ds, remaining > 0: %v, %d keys %v (hash %x)", ttl.GrantedTTL, ttl.TTL > 0, len(ttl.Keys), keys, h.Sum64())
	}
	return out
}

// compare checks what the store cli speaks to holds against the source
// etcd's.
func compare(ctx context.Context, t *testing.T, what string, cli *clientv3.Client, h history,
	want, wantPast map[string]kvState, wantEvents []event, wantLeases map[clientv3.LeaseID]string) {
	t.Helper()
	got := dumpAll(ctx, t, cli, 0)
	diffKVs(t, what+", current revision", want, got)
	diffKVs(t, fmt.Sprintf("%s, at revision %d", what, h.past), wantPast, dumpAll(ctx, t, cli, h.past))
	r, err := cli.Get(ctx, "k/")
	if err != nil {
		t.Fatal(err)
	}
	if r.Header.Revision != h.last {
		t.Errorf("%s: store revision %d, want %d", what, r.Header.Revision, h.last)
	}
	if _, err := cli.Get(ctx, "k/000000", clientv3.WithRev(h.compact-1)); err != rpctypes.ErrCompacted {
		t.Errorf("%s: a read below the compact revision %d: %v, want %v", what, h.compact, err, rpctypes.ErrCompacted)
	}
	if _, err := cli.Get(ctx, "k/000000", clientv3.WithRev(h.compact)); err != nil {
		t.Errorf("%s: a read at the compact revision %d: %v", what, h.compact, err)
	}
	gotEvents := watchEvents(ctx, t, cli, h.watchFrom, h.last)
	if len(gotEvents) != len(wantEvents) {
		t.Errorf("%s: a watch from %d sees %d events, the source etcd's %d", what, h.watchFrom, len(gotEvents), len(wantEvents))
	}
	for i := range min(len(gotEvents), len(wantEvents)) {
		if gotEvents[i] != wantEvents[i] {
			t.Errorf("%s: watch event %d is %+v, the source etcd's %+v", what, i, gotEvents[i], wantEvents[i])
			break
		}
	}
	gotLeases := leaseState(ctx, t, cli)
	for id, w := range wantLeases {
		if g := gotLeases[id]; g != w {
			t.Errorf("%s: lease %x: %s, want %s", what, id, g, w)
		}
	}
	if len(gotLeases) != len(wantLeases) {
		t.Errorf("%s: %d leases, want %d", what, len(gotLeases), len(wantLeases))
	}
}

func diffKVs(t *testing.T, what string, want, got map[string]kvState) {
	t.Helper()
	bad := 0
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			if bad++; bad <= 5 {
				t.Errorf("%s: key %q is %+v (present %v), want %+v", what, k, g, ok, w)
			}
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			if bad++; bad <= 5 {
				t.Errorf("%s: key %q should not be there", what, k)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d keys differ (of %d)", what, bad, len(want))
	} else {
		t.Logf("%s: all %d keys equal", what, len(want))
	}
}

// startOneEtcd starts a one-member etcd named name with its data in
// base/name (a data dir etcdctl snapshot restore made, when peer is the
// peer address it was restored for), and stops it when the test ends.
func startOneEtcd(t *testing.T, base, name, peer string) *testutil.Member {
	t.Helper()
	if peer == "" {
		peer = testutil.FreeAddr(t)
	}
	m := &testutil.Member{Name: name, ClientAddr: testutil.FreeAddr(t), PeerAddr: peer,
		Dir: filepath.Join(base, name), Log: filepath.Join(base, name+".log"), Bin: *etcdBin}
	m.Args = []string{
		"--name", name, "--data-dir", m.Dir,
		"--listen-client-urls", "http://" + m.ClientAddr, "--advertise-client-urls", "http://" + m.ClientAddr,
		"--listen-peer-urls", "http://" + m.PeerAddr, "--initial-advertise-peer-urls", "http://" + m.PeerAddr,
		"--initial-cluster", name + "=http://" + m.PeerAddr,
		"--logger", "zap", "--log-level", "warn",
	}
	m.Start(t)
	t.Cleanup(m.Stop)
	waitServing(context.Background(), t, oneClient(t, m.ClientAddr), m)
	return m
}

func oneClient(t *testing.T, addr string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// waitServing polls until the member answers a read.
func waitServing(ctx context.Context, t *testing.T, cli *clientv3.Client, m *testutil.Member) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if !m.Running() {
			t.Fatalf("%s exited: %v\n%s", m.Name, m.Err(), m.LogTail(30))
		}
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := cli.Get(rctx, "health-probe")
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not answer: %v\n%s", m.Name, err, m.LogTail(30))
		}
		time.Sleep(100 * time.Millisecond) // poll interval, not a synchronisation
	}
}

// etcdctl runs Debian's etcdctl (API 3) and returns its output.
func etcdctl(ctx context.Context, t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, *etcdctlBin, args...)
	cmd.Env = append(os.Environ(), "ETCDCTL_API=3")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("etcdctl %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return string(out)
}
