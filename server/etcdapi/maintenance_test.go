package etcdapi_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dkv-io/dkv/server"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/protobuf/proto"
)

// TestMaintenance: Status answers what etcdctl endpoint status shows,
// with a version etcd clients parse; HashKV at a revision does not move
// with later writes; Alarm raises and clears NOSPACE, which refuses and
// then allows writes; Defragment runs; Snapshot streams an etcd
// snapshot (bbolt in etcd's schema, then its SHA-256).
func TestMaintenance(t *testing.T) {
	// The member measures its space rarely, so an alarm raised through
	// the API is not cleared by a measurement during the test.
	n := startNodeWith(t, func(c *server.Config) { c.SpaceCheckInterval = time.Hour })
	ctx := ctxT(t)
	m := etcdserverpb.NewMaintenanceClient(n.conn)

	st, err := m.Status(ctx, &etcdserverpb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(st.Version, "3.7.0+dkv.") {
		t.Fatalf("version %q", st.Version)
	}
	if st.Leader == 0 || st.Leader != st.Header.MemberId || st.RaftTerm == 0 || st.RaftIndex == 0 ||
		st.RaftAppliedIndex == 0 || st.DbSize <= 0 || st.DbSizeInUse <= 0 || st.IsLearner {
		t.Fatalf("status %v", st)
	}

	put := func(k, v string) (*etcdserverpb.PutResponse, error) {
		return n.kv.Put(ctx, &etcdserverpb.PutRequest{Key: []byte(k), Value: []byte(v)})
	}
	p, err := put("a", "1")
	if err != nil {
		t.Fatal(err)
	}
	h1, err := m.HashKV(ctx, &etcdserverpb.HashKVRequest{Revision: p.Header.Revision})
	if err != nil {
		t.Fatal(err)
	}
	if h1.HashRevision != p.Header.Revision {
		t.Fatalf("hash revision %d, want %d", h1.HashRevision, p.Header.Revision)
	}
	pb, err := put("b", "2")
	if err != nil {
		t.Fatal(err)
	}
	h2, err := m.HashKV(ctx, &etcdserverpb.HashKVRequest{Revision: p.Header.Revision})
	if err != nil || h2.Hash != h1.Hash {
		t.Fatalf("hash at the same revision after a write: %v, %v (was %v)", h2, err, h1)
	}
	hNow, err := m.HashKV(ctx, &etcdserverpb.HashKVRequest{})
	if err != nil || hNow.Hash == h1.Hash || hNow.HashRevision <= h1.HashRevision {
		t.Fatalf("hash now: %v %v (at rev %v)", hNow, err, h1)
	}
	if _, err := n.kv.Compact(ctx, &etcdserverpb.CompactionRequest{Revision: pb.Header.Revision}); err != nil {
		t.Fatal(err)
	}
	hc, err := m.HashKV(ctx, &etcdserverpb.HashKVRequest{})
	if err != nil || hc.CompactRevision != pb.Header.Revision {
		t.Fatalf("hash after compaction: %v %v", hc, err)
	}
	_, err = m.HashKV(ctx, &etcdserverpb.HashKVRequest{Revision: p.Header.Revision})
	isErr(t, err, rpctypes.ErrGRPCCompacted)

	// Alarms.
	if a, err := m.Alarm(ctx, &etcdserverpb.AlarmRequest{Action: etcdserverpb.AlarmRequest_GET}); err != nil || len(a.Alarms) != 0 {
		t.Fatalf("alarms at start: %v %v", a, err)
	}
	id := st.Header.MemberId
	a, err := m.Alarm(ctx, &etcdserverpb.AlarmRequest{Action: etcdserverpb.AlarmRequest_ACTIVATE, MemberID: id, Alarm: etcdserverpb.AlarmType_NOSPACE})
	if err != nil || len(a.Alarms) != 1 || a.Alarms[0].MemberID != id {
		t.Fatalf("activate: %v %v", a, err)
	}
	_, err = put("c", "3")
	isErr(t, err, rpctypes.ErrGRPCNoSpace)
	g, err := m.Alarm(ctx, &etcdserverpb.AlarmRequest{Action: etcdserverpb.AlarmRequest_GET})
	if err != nil || len(g.Alarms) != 1 || g.Alarms[0].Alarm != etcdserverpb.AlarmType_NOSPACE {
		t.Fatalf("alarms raised: %v %v", g, err)
	}
	if st, err := m.Status(ctx, &etcdserverpb.StatusRequest{}); err != nil || len(st.Errors) != 1 || !strings.Contains(st.Errors[0], "NOSPACE") {
		t.Fatalf("status during the alarm: %v %v", st, err)
	}
	if d, err := m.Alarm(ctx, &etcdserverpb.AlarmRequest{Action: etcdserverpb.AlarmRequest_DEACTIVATE, MemberID: id, Alarm: etcdserverpb.AlarmType_NOSPACE}); err != nil || len(d.Alarms) != 1 {
		t.Fatalf("deactivate: %v %v", d, err)
	}
	if _, err := put("c", "3"); err != nil {
		t.Fatalf("put after the alarm was cleared: %v", err)
	}
	if _, err := m.Alarm(ctx, &etcdserverpb.AlarmRequest{Action: etcdserverpb.AlarmRequest_ACTIVATE, MemberID: id, Alarm: etcdserverpb.AlarmType_CORRUPT}); err == nil {
		t.Fatal("activating CORRUPT was accepted")
	}

	if _, err := m.Defragment(ctx, &etcdserverpb.DefragmentRequest{}); err != nil {
		t.Fatal(err)
	}

	// The snapshot is etcd's: a bbolt database in etcd's schema, then
	// its SHA-256, the stream ending with remaining 0.
	ss, err := m.Snapshot(ctx, &etcdserverpb.SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var blob bytes.Buffer
	var last *etcdserverpb.SnapshotResponse
	for first := true; ; first = false {
		r, err := ss.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if first && r.Version == "" {
			t.Fatal("first snapshot message carries no version")
		}
		if want := uint64(blob.Len()+len(r.Blob)) + r.RemainingBytes; last != nil && want != uint64(blob.Len())+last.RemainingBytes {
			t.Fatalf("remaining bytes %d after %d bytes, %d before", r.RemainingBytes, blob.Len()+len(r.Blob), last.RemainingBytes)
		}
		blob.Write(r.Blob)
		last = r
	}
	if last == nil || last.RemainingBytes != 0 || blob.Len() < 4096 {
		t.Fatalf("snapshot: %d bytes, last %v", blob.Len(), last)
	}
	// As etcd's, the stream ends with the SHA-256 of the rest, where
	// etcdctl snapshot save looks for it: 32 bytes past a 512-byte block.
	b := blob.Bytes()
	body, sum := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
	if got := sha256.Sum256(body); blob.Len()%512 != sha256.Size || !bytes.Equal(got[:], sum) {
		t.Fatalf("snapshot of %d bytes does not end with its SHA-256", blob.Len())
	}
	path := filepath.Join(t.TempDir(), "snap.db")
	if err := os.WriteFile(path, body, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("the snapshot is not a bbolt database: %v", err)
	}
	defer db.Close()
	latest := map[string]string{}
	err = db.View(func(tx *bolt.Tx) error {
		for _, name := range []string{"meta", "lease", "cluster", "auth", "members"} {
			if tx.Bucket([]byte(name)) == nil {
				return fmt.Errorf("no %q bucket", name)
			}
		}
		kb := tx.Bucket([]byte("key"))
		if kb == nil {
			return errors.New("no key bucket")
		}
		return kb.ForEach(func(k, v []byte) error {
			kv := &mvccpb.KeyValue{}
			if err := proto.Unmarshal(v, kv); err != nil {
				return err
			}
			if len(k) != 17 || k[8] != '_' || int64(binary.BigEndian.Uint64(k[:8])) != kv.ModRevision {
				return fmt.Errorf("key bucket record %x holds %v", k, kv)
			}
			latest[string(kv.Key)] = string(kv.Value)
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if latest["a"] != "1" || latest["b"] != "2" || latest["c"] != "3" {
		t.Fatalf("the snapshot's keys: %v, want a=1 b=2 c=3", latest)
	}
}
