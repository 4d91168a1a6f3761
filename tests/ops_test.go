package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/keys"
	"github.com/dkv-io/dkv/internal/testutil"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// opsCLI runs the dkv binary and returns its stdout, stderr and exit code.
func opsCLI(t *testing.T, argv ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(testutil.DKVBinary(t), argv...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("dkv %v: %v", argv, err)
	}
	return out.String(), errb.String(), code
}

type ackedPut struct {
	key, value string
	rev        int64
}

// TestBackupUnderLoadRestoresIntoNewCluster takes a backup with 'dkv
// snapshot save' from a follower of a 3-node cluster while 4 clients
// write, restores it with 'dkv snapshot restore' into the data dirs of a
// new 3-node cluster, and checks what an operator relies on: the new
// cluster's HashKV at the backup's revision equals the old one's at that
// revision, every write acknowledged at or before that revision is there
// and none after it, and the new cluster takes writes.
func TestBackupUnderLoadRestoresIntoNewCluster(t *testing.T) {
	c := servertest.NewCluster(t, 3, server.Config{})
	var eps []string
	for _, nd := range c.Nodes {
		eps = append(eps, nd.Srv.ClientAddr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := client.New(ctx, client.Config{Endpoints: eps})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	var (
		mu    sync.Mutex
		acked []ackedPut
		wg    sync.WaitGroup
	)
	stop := make(chan struct{})
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k, v := fmt.Sprintf("load/%d/%06d", g, i), fmt.Sprintf("v%d.%d", g, i)
				pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
				r, err := cl.Put(pctx, k, []byte(v))
				pcancel()
				if err == nil {
					mu.Lock()
					acked = append(acked, ackedPut{k, v, r.Revision})
					mu.Unlock()
				}
			}
		}()
	}
	// Let the load run until a few hundred writes were acknowledged (or
	// 20 s), back up from a follower under that load, then write on a
	// little more.
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if n >= 300 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	follower := c.Followers()[0]
	file := filepath.Join(t.TempDir(), "backup.snap")
	out, errOut, code := opsCLI(t, "--endpoints", follower.Srv.ClientAddr(), "--timeout", "10s", "snapshot", "save", file)
	if code != 0 {
		t.Fatalf("snapshot save: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("%s", strings.TrimSpace(out))
	mu.Lock()
	atBackup := len(acked)
	mu.Unlock()
	for {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if n >= atBackup+100 || time.Now().After(deadline.Add(10*time.Second)) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()

	out, errOut, code = opsCLI(t, "-o", "json", "snapshot", "status", file)
	if code != 0 {
		t.Fatalf("snapshot status: exit %d\n%s%s", code, out, errOut)
	}
	var st struct {
		Revision int64  `json:"revision"`
		KeyCount int64  `json:"key_count"`
		Cluster  string `json:"cluster_id"`
		Member   string `json:"member_name"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("snapshot status output %q: %v", out, err)
	}
	if st.Member != follower.Name {
		t.Errorf("backup says it came from member %q, want %q", st.Member, follower.Name)
	}
	var before, after int
	for _, a := range acked {
		if a.rev <= st.Revision {
			before++
		} else {
			after++
		}
	}
	t.Logf("backup at revision %d with %d keys; %d acknowledged writes before it, %d after", st.Revision, st.KeyCount, before, after)
	if before == 0 || after == 0 {
		t.Fatalf("the backup was not taken under load: %d acknowledged writes before revision %d, %d after", before, st.Revision, after)
	}
	want := c.Hash(c.Nodes[0], st.Revision)
	for _, nd := range c.Nodes[1:] {
		if h := c.Hash(nd, st.Revision); h.GetHash() != want.GetHash() {
			t.Fatalf("the original members disagree at revision %d: %s %x, %s %x", st.Revision, c.Nodes[0].Name, want.GetHash(), nd.Name, h.GetHash())
		}
	}

	// A new cluster, each member's data dir restored from the backup.
	restored := servertest.NewClusterEach(t, 3, server.Config{}, func(nd *servertest.Node) {
		out, errOut, code := opsCLI(t, "snapshot", "restore", file, "--data-dir", nd.Cfg.DataDir, "--name", nd.Name,
			"--initial-cluster", nd.Cfg.InitialCluster, "--initial-cluster-token", nd.Cfg.InitialClusterToken)
		if code != 0 {
			t.Fatalf("snapshot restore for %s: exit %d\n%s%s", nd.Name, code, out, errOut)
		}
	})
	for _, nd := range restored.Nodes {
		// Each member must have applied its bootstrap before it answers
		// for the state: poll its HashKV at the backup's revision.
		var h *dkvpb.HashKVResponse
		testutil.Eventually(t, 10*time.Second, nd.Name+" answers HashKV at the backup revision", func() bool {
			hctx, hcancel := context.WithTimeout(ctx, 2*time.Second)
			defer hcancel()
			h, err = nd.Cluster.HashKV(hctx, &dkvpb.HashKVRequest{Revision: st.Revision})
			return err == nil
		})
		if h.GetHash() != want.GetHash() {
			t.Errorf("restored %s: HashKV at revision %d is %x, the original cluster's %x", nd.Name, st.Revision, h.GetHash(), want.GetHash())
		}
		if h.GetHeader().GetClusterId() == want.GetHeader().GetClusterId() {
			t.Errorf("restored %s has the original cluster's id %x; a restore must make a new cluster", nd.Name, h.GetHeader().GetClusterId())
		}
	}
	rn := restored.Nodes[2]
	var missing, present []string
	for _, a := range acked {
		r, err := rn.KV.Range(ctx, &dkvpb.RangeRequest{Key: []byte(a.key)})
		if err != nil {
			t.Fatalf("read %s on the restored cluster: %v", a.key, err)
		}
		switch {
		case a.rev <= st.Revision && (len(r.GetKvs()) != 1 || string(r.GetKvs()[0].GetValue()) != a.value):
			missing = append(missing, a.key)
		case a.rev > st.Revision && len(r.GetKvs()) != 0:
			present = append(present, a.key)
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d writes acknowledged at or before the backup revision are missing from the restored cluster, e.g. %s", len(missing), missing[0])
	}
	if len(present) > 0 {
		t.Errorf("%d writes acknowledged after the backup revision are in the restored cluster, e.g. %s", len(present), present[0])
	}
	pr, err := rn.KV.Put(ctx, &dkvpb.PutRequest{Key: []byte("after-restore"), Value: []byte("ok")})
	if err != nil {
		t.Fatalf("the restored cluster refuses a write: %v", err)
	}
	if pr.GetHeader().GetRevision() != st.Revision+1 {
		t.Errorf("the first write on the restored cluster got revision %d, want %d (the backup's + 1)", pr.GetHeader().GetRevision(), st.Revision+1)
	}

	// The same backup cannot be restored over a data dir in use, and a
	// damaged copy is refused by status and restore alike.
	_, errOut, code = opsCLI(t, "snapshot", "restore", file, "--data-dir", rn.Cfg.DataDir, "--name", rn.Name, "--initial-cluster", rn.Cfg.InitialCluster)
	if code == 0 || !strings.Contains(errOut, "is not empty") {
		t.Errorf("restore into a non-empty data dir: exit %d, stderr %q; want a refusal naming the non-empty dir", code, errOut)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0x40
	bad := filepath.Join(t.TempDir(), "damaged.snap")
	if err := os.WriteFile(bad, data, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, argv := range [][]string{
		{"snapshot", "status", bad},
		{"snapshot", "restore", bad, "--data-dir", filepath.Join(t.TempDir(), "x"), "--name", "n1", "--initial-cluster", "n1=127.0.0.1:1"},
	} {
		_, errOut, code := opsCLI(t, argv...)
		if code != 11 || !strings.Contains(errOut, "checksum mismatch") {
			t.Errorf("dkv %s of a damaged file: exit %d, stderr %q; want exit 11 (DataDamaged) and a checksum mismatch", argv[1], code, errOut)
		}
	}
}

// TestCorruptMemberRaisesAlarmAndRefusesReads changes one member's copy
// of a key's value directly in Pebble, behind raft's back, while it is
// stopped, and restarts it: the divergence check (at start, and every
// 300 ms) must raise a CORRUPT alarm for that member, visible in every
// member's status; the member must refuse client reads, and the other
// members must go on serving them.
func TestCorruptMemberRaisesAlarmAndRefusesReads(t *testing.T) {
	const interval = 300 * time.Millisecond
	c := servertest.NewClusterEach(t, 3, server.Config{CorruptCheckInterval: interval}, func(nd *servertest.Node) { nd.Cfg.HTTPAddr = testutil.FreeAddr(t) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	leader := c.WaitLeader()
	for _, kv := range [][2]string{{"a", "alpha"}, {"b", "beta"}} {
		if _, err := leader.KV.Put(ctx, &dkvpb.PutRequest{Key: []byte(kv[0]), Value: []byte(kv[1])}); err != nil {
			t.Fatal(err)
		}
	}
	c.WaitConverged()
	victim := c.Followers()[0]
	// A quiet cluster has raised nothing.
	for _, nd := range c.Nodes {
		st, err := nd.Cluster.Status(ctx, &dkvpb.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(st.GetAlarms()) != 0 {
			t.Fatalf("alarms before any damage: %v", st.GetAlarms())
		}
	}
	restarted := corruptBehindRaft(t, c, victim)

	var alarms []*dkvpb.AlarmMember
	testutil.Eventually(t, 10*time.Second, "a CORRUPT alarm for "+victim.Name, func() bool {
		st, err := c.Leader().Cluster.Status(ctx, &dkvpb.StatusRequest{})
		if err != nil {
			return false
		}
		alarms = st.GetAlarms()
		return len(alarms) > 0
	})
	t.Logf("CORRUPT alarm raised %v after the restart: %v", time.Since(restarted).Round(time.Millisecond), alarms)
	if len(alarms) != 1 || alarms[0].GetMemberId() != victim.ID() || alarms[0].GetAlarm() != dkvpb.AlarmType_ALARM_TYPE_CORRUPT {
		t.Fatalf("alarms %v; want one CORRUPT alarm, for %s (%x)", alarms, victim.Name, victim.ID())
	}
	// /metrics on every member counts it.
	for _, nd := range c.Nodes {
		testutil.Eventually(t, 5*time.Second, nd.Name+" /metrics dkv_corrupt_alarms 1", func() bool {
			resp, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + nd.Srv.HTTPAddr() + "/metrics")
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			return regexp.MustCompile(`(?m)^dkv_corrupt_alarms 1$`).Match(body)
		})
	}
	// The diverged member refuses reads, linearizable and serializable.
	for _, ser := range []bool{false, true} {
		testutil.Eventually(t, 5*time.Second, victim.Name+" refusing reads", func() bool {
			_, err := victim.KV.Range(ctx, &dkvpb.RangeRequest{Key: []byte("a"), Serializable: ser})
			return err != nil
		})
		_, err := victim.KV.Range(ctx, &dkvpb.RangeRequest{Key: []byte("a"), Serializable: ser})
		if dkverr.CodeOf(dkverr.FromGRPC(err)) != dkverr.Unavailable || !strings.Contains(err.Error(), "CORRUPT") {
			t.Errorf("read (serializable %v) on the diverged member: %v; want Unavailable naming the CORRUPT alarm", ser, err)
		}
	}
	// The healthy members serve the right value.
	for _, nd := range c.Nodes {
		if nd == victim {
			continue
		}
		r, err := nd.KV.Range(ctx, &dkvpb.RangeRequest{Key: []byte("a")})
		if err != nil || len(r.GetKvs()) != 1 || string(r.GetKvs()[0].GetValue()) != "alpha" {
			t.Errorf("read of a on healthy %s: %v %v; want alpha", nd.Name, r.GetKvs(), err)
		}
	}
	// Disarming without replacing the member: the next check raises it
	// again.
	mc := dkvpb.NewMaintenanceClient(mustConn(t, c.Leader()))
	resp, err := mc.Alarm(ctx, &dkvpb.AlarmActionRequest{Action: dkvpb.AlarmActionRequest_DISARM, Alarm: dkvpb.AlarmType_ALARM_TYPE_CORRUPT})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetAlarms()) != 0 {
		t.Fatalf("alarms after disarm: %v", resp.GetAlarms())
	}
	testutil.Eventually(t, 10*time.Second, "the CORRUPT alarm raised again", func() bool {
		r, err := mc.Alarm(ctx, &dkvpb.AlarmActionRequest{})
		return err == nil && len(r.GetAlarms()) == 1 && r.GetAlarms()[0].GetMemberId() == victim.ID()
	})
}

func mustConn(t *testing.T, nd *servertest.Node) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+nd.Srv.ClientAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestScheduledBackupsOnTheLeaderOnly gives every member of a 3-node
// cluster a backup dir with a 1 s interval and --backup-keep 2: only the
// leader's dir gets backups, each a verified file, and no more than 2 are
// kept.
func TestScheduledBackupsOnTheLeaderOnly(t *testing.T) {
	c := servertest.NewClusterEach(t, 3, server.Config{}, func(nd *servertest.Node) {
		nd.Cfg.BackupDir = filepath.Join(filepath.Dir(nd.Dir), nd.Name+"-backups")
		nd.Cfg.BackupInterval = time.Second
		nd.Cfg.BackupKeep = 2
	})
	leader := c.WaitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := leader.KV.Put(ctx, &dkvpb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	list := func(nd *servertest.Node) []string {
		m, _ := filepath.Glob(filepath.Join(nd.Cfg.BackupDir, "dkv-backup-*.snap"))
		return m
	}
	// Three ticks: two files kept, the first one pruned.
	var first string
	testutil.Eventually(t, 20*time.Second, "a first scheduled backup", func() bool {
		if l := list(leader); len(l) > 0 {
			first = l[0]
			return true
		}
		return false
	})
	testutil.Eventually(t, 20*time.Second, "the first backup pruned after two newer ones", func() bool {
		_, err := os.Stat(first)
		return os.IsNotExist(err)
	})
	if c.Leader() != leader {
		t.Skip("leadership moved during the test; the leader-only check would not be meaningful")
	}
	followers := c.Followers()
	// No more ticks: the files listed stay. The leader stops last: a
	// leader stopped while its followers run hands leadership over, and
	// the follower it chose would take a backup of its own.
	for _, nd := range followers {
		c.Stop(nd)
	}
	c.Stop(leader)
	if l := list(leader); len(l) > 2 || len(l) == 0 {
		t.Fatalf("leader %s keeps %d backups, want at most 2: %v", leader.Name, len(l), l)
	}
	for _, f := range list(leader) {
		out, errOut, code := opsCLI(t, "snapshot", "status", f)
		if code != 0 || !strings.Contains(out, "member:            "+leader.Name) {
			t.Errorf("snapshot status %s: exit %d %s%s", f, code, out, errOut)
		}
	}
	for _, nd := range followers {
		if l := list(nd); len(l) != 0 {
			t.Errorf("follower %s wrote scheduled backups: %v", nd.Name, l)
		}
	}
}

// corruptBehindRaft stops victim, gives the newest version of its key
// "a" the record of key "b"'s newest version directly in Pebble, and
// starts it again.
func corruptBehindRaft(t *testing.T, c *servertest.Cluster, victim *servertest.Node) time.Time {
	t.Helper()
	c.Stop(victim)
	db, err := pebble.Open(victim.Dir, &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// History records: s/mh/<key>\x00\x01<^rev>, the newest first.
	newest := func(k string) (key, val []byte) {
		group := append(append([]byte(nil), keys.MVCCHistoryPrefix...), k+"\x00\x01"...)
		end := append(group[:len(group)-1:len(group)-1], 0x02) // past the group's versions
		it, err := db.NewIter(&pebble.IterOptions{LowerBound: group, UpperBound: end})
		if err != nil {
			t.Fatal(err)
		}
		defer it.Close()
		if !it.First() {
			t.Fatalf("no history record of %q on %s", k, victim.Name)
		}
		return append([]byte(nil), it.Key()...), append([]byte(nil), it.Value()...)
	}
	ka, _ := newest("a")
	_, vb := newest("b")
	if err := db.Set(ka, vb, pebble.Sync); err != nil { // a's record now says b's value
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	c.Start(victim)
	return restarted
}

// TestCorruptCheckWithAuth: with auth enabled the members' checks of each
// other carry no user's token; they prove membership instead, and a
// diverged member is still found. A client without credentials gets
// neither HashKV nor the alarms.
func TestCorruptCheckWithAuth(t *testing.T) {
	c := servertest.NewCluster(t, 3, server.Config{CorruptCheckInterval: 300 * time.Millisecond, AuthBcryptCost: bcrypt.MinCost})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	setup := authClient(t, c, "", "")
	for _, k := range []string{"a", "b"} {
		_, err := setup.Put(ctx, k, []byte("v-"+k))
		mustOK(t, "put "+k, err)
	}
	mustOK(t, "user add root", setup.UserAdd(ctx, "root", "rootpw"))
	mustOK(t, "grant root", setup.UserGrantRole(ctx, "root", "root"))
	mustOK(t, "auth enable", setup.AuthEnable(ctx))
	c.WaitConverged()
	victim := c.Followers()[0]
	corruptBehindRaft(t, c, victim)
	root := authClient(t, c, "root", "rootpw")
	testutil.Eventually(t, 10*time.Second, "a CORRUPT alarm for "+victim.Name+" with auth on", func() bool {
		al, err := root.Alarms(ctx)
		return err == nil && len(al) == 1 && al[0].GetMemberId() == victim.ID() && al[0].GetAlarm() == dkvpb.AlarmType_ALARM_TYPE_CORRUPT
	})
	if _, err := c.Nodes[0].Cluster.HashKV(ctx, &dkvpb.HashKVRequest{}); dkverr.CodeOf(dkverr.FromGRPC(err)) != dkverr.Unauthenticated {
		t.Errorf("HashKV without credentials: %v, want Unauthenticated", err)
	}
	// A made-up proof is no credential.
	fake := metadata.AppendToOutgoingContext(ctx, "dkv-member-proof", fmt.Sprintf("%x:%d:%s", c.Nodes[1].ID(), time.Now().Unix()/60, strings.Repeat("ab", 32)))
	if _, err := c.Nodes[0].Cluster.HashKV(fake, &dkvpb.HashKVRequest{}); dkverr.CodeOf(dkverr.FromGRPC(err)) != dkverr.Unauthenticated {
		t.Errorf("HashKV with a forged member proof: %v, want Unauthenticated", err)
	}
}
