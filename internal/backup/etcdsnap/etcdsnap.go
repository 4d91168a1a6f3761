package etcdsnap

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/dkv-io/dkv/internal/backup"
	"github.com/dkv-io/dkv/internal/lease"
	"github.com/dkv-io/dkv/internal/mvcc"
	"github.com/dkv-io/dkv/internal/storekeys"
	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/server/v3/lease/leasepb"
	"google.golang.org/protobuf/proto"
)

// etcd's bucket and key names.
var (
	bucketKey            = []byte("key")
	bucketMeta           = []byte("meta")
	bucketLease          = []byte("lease")
	bucketCluster        = []byte("cluster")
	bucketAuth           = []byte("auth")
	bucketAuthUsers      = []byte("authUsers")
	bucketAuthRoles      = []byte("authRoles")
	bucketAlarm          = []byte("alarm")
	bucketMembers        = []byte("members")
	bucketMembersRemoved = []byte("members_removed")

	metaConsistentIndex = []byte("consistent_index")
	metaTerm            = []byte("term")
	metaScheduled       = []byte("scheduledCompactRev")
	metaFinished        = []byte("finishedCompactRev")
	clusterVersionKey   = []byte("clusterVersion")
	authEnabledKey      = []byte("authEnabled")
)

// reserved starts the physical keys of DKV's named stores.
var reserved = []byte(storekeys.Reserved)

// revBytes is etcd's 17 bytes of a revision: main, '_', sub.
const revBytes = 17

func appendRev(dst []byte, main, sub int64) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(main))
	dst = append(dst, '_')
	return binary.BigEndian.AppendUint64(dst, uint64(sub))
}

// ClusterVersion is the cluster version a written snapshot records: the
// etcd API level DKV serves.
const ClusterVersion = "3.5.0"

// WriteOptions is what a written snapshot says about the member it
// came from.
type WriteOptions struct {
	// ConsistentIndex and Term are the raft position of the state
	// (etcd's restore replaces them).
	ConsistentIndex, Term uint64
}

// Info is what a snapshot holds.
type Info struct {
	Revision, CompactRevision int64
	// Versions is how many versions the key bucket holds; Keys how many
	// keys are live.
	Versions, Keys int64
	Leases         int64
	// Checksum says whether the file carried etcd's SHA-256 (checked);
	// SHA256 is the database's, in hex (Import only).
	Checksum bool
	SHA256   string
	// Unleased counts live keys naming a lease the file does not hold.
	Unleased int64
	// AuthEnabled: the etcd cluster had auth on; its users and roles are
	// not carried over.
	AuthEnabled bool
	// ClampedLeases counts leases whose TTL is outside DKV's bounds
	// (1 s .. 1 year) and was moved to the nearest one.
	ClampedLeases int64
}

// boltBatch is how many records one bolt transaction writes.
const boltBatch = 20000

// Write writes the replicated state r holds (read it from one Pebble
// snapshot) as an etcd database at path, which must not exist: the
// default store's keys, those an etcd client sees (named stores' keys
// are DKV's own and are left out), and the leases. It
// writes no checksum: the etcd API streams the file and then its
// SHA-256, as etcd does.
func Write(path string, r pebble.Reader, o WriteOptions) (Info, error) {
	var info Info
	if _, err := os.Lstat(path); err == nil {
		return info, fmt.Errorf("%s already exists", path)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoSync: true, NoFreelistSync: true, Timeout: time.Second})
	if err != nil {
		return info, err
	}
	fail := func(err error) (Info, error) {
		db.Close()
		os.Remove(path)
		return Info{}, err
	}
	cur, comp, err := mvcc.Counters(r)
	if err != nil {
		return fail(err)
	}
	info.Revision, info.CompactRevision = cur, comp
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketKey, bucketMeta, bucketLease, bucketCluster, bucketAuth, bucketAuthUsers,
			bucketAuthRoles, bucketAlarm, bucketMembers, bucketMembersRemoved} {
			if _, err := tx.CreateBucket(b); err != nil {
				return err
			}
		}
		m := tx.Bucket(bucketMeta)
		if err := m.Put(metaConsistentIndex, binary.BigEndian.AppendUint64(nil, o.ConsistentIndex)); err != nil {
			return err
		}
		if err := m.Put(metaTerm, binary.BigEndian.AppendUint64(nil, o.Term)); err != nil {
			return err
		}
		if comp > 0 {
			if err := m.Put(metaScheduled, appendRev(nil, comp, 0)); err != nil {
				return err
			}
			if err := m.Put(metaFinished, appendRev(nil, comp, 0)); err != nil {
				return err
			}
		}
		if err := tx.Bucket(bucketCluster).Put(clusterVersionKey, []byte(ClusterVersion)); err != nil {
			return err
		}
		if err := tx.Bucket(bucketAuth).Put(authEnabledKey, []byte{0}); err != nil {
			return err
		}
		lb := tx.Bucket(bucketLease)
		var lerr error
		err := lease.List(r, func(rec lease.Record) bool {
			l := &leasepb.Lease{ID: rec.ID, TTL: max(rec.TTLMs/1000, 1)}
			if rec.RemainingMs > 0 && rec.RemainingMs < rec.TTLMs {
				l.RemainingTTL = (rec.RemainingMs + 999) / 1000
			}
			var v []byte
			if v, lerr = proto.Marshal(l); lerr != nil {
				return false
			}
			if lerr = lb.Put(binary.BigEndian.AppendUint64(nil, uint64(rec.ID)), v); lerr != nil {
				return false
			}
			info.Leases++
			return true
		})
		if err == nil {
			err = lerr
		}
		return err
	})
	if err != nil {
		return fail(err)
	}

	// The versions, in revision order: bolt appends them to the right
	// edge of its tree, so pages are filled completely.
	var tx *bolt.Tx
	var kb *bolt.Bucket
	n := 0
	kv := &mvccpb.KeyValue{}
	var k, v []byte
	marshal := proto.MarshalOptions{Deterministic: true}
	err = mvcc.Export(r, []byte(storekeys.Reserved), func(ver *mvcc.Version) error {
		if tx == nil {
			var err error
			if tx, err = db.Begin(true); err != nil {
				return err
			}
			kb = tx.Bucket(bucketKey)
			kb.FillPercent = 1
		}
		k = appendRev(make([]byte, 0, revBytes+1), ver.Rev, ver.Sub)
		*kv = mvccpb.KeyValue{Key: ver.Key}
		if ver.Tombstone {
			k = append(k, 't')
		} else {
			kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease = ver.Value, ver.Create, ver.Rev, ver.Version, ver.Lease
		}
		var err error
		if v, err = marshal.Marshal(kv); err != nil {
			return err
		}
		if err := kb.Put(k, v); err != nil {
			return err
		}
		info.Versions++
		if n++; n >= boltBatch {
			n = 0
			err := tx.Commit()
			tx = nil
			return err
		}
		return nil
	})
	if tx != nil {
		if err == nil {
			err = tx.Commit()
		} else {
			tx.Rollback()
		}
	}
	if err != nil {
		return fail(err)
	}
	info.Keys, err = countLive(r)
	if err != nil {
		return fail(err)
	}
	if err := db.Sync(); err != nil {
		return fail(err)
	}
	if err := db.Close(); err != nil {
		os.Remove(path)
		return Info{}, err
	}
	return info, nil
}

func countLive(r pebble.Reader) (int64, error) {
	// The default store's live keys: those below the named stores'.
	return mvcc.CountLive(r, nil, reserved)
}

// ErrNotEtcd is wrapped by Import's refusal of a file that is not an
// etcd snapshot, ErrDamaged by its refusal of one whose checksum or
// contents are wrong.
// ErrDamaged also matches backup.ErrDamaged, so the CLI, which must
// not link this package, exits with its damaged-data code.
var (
	ErrNotEtcd = errors.New("not an etcd snapshot")
	ErrDamaged = &alsoErr{"etcd snapshot is damaged", backup.ErrDamaged}
)

// alsoErr is a sentinel error that errors.Is also matches to another.
type alsoErr struct {
	msg  string
	also error
}

func (e *alsoErr) Error() string        { return e.msg }
func (e *alsoErr) Is(target error) bool { return target == e.also }

// checkSum verifies the SHA-256 etcd appends to a snapshot when the
// file has one (its size is 32 bytes past a 512-byte boundary, etcd's
// own test: a bolt file's size is a multiple of its page size). It
// returns whether there was one, and the SHA-256 of the database.
func checkSum(path string) (bool, []byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, nil, err
	}
	size := fi.Size()
	head := make([]byte, 8)
	if _, err := io.ReadFull(f, head); err != nil {
		return false, nil, fmt.Errorf("%s: %w: %d bytes is too short for a bbolt database", path, ErrNotEtcd, size)
	}
	if string(head) == "DKVSNAP1" {
		return false, nil, fmt.Errorf("%s: %w: it is a DKV backup ('dkv snapshot save'); restore it without --from-etcd", path, ErrNotEtcd)
	}
	has := size%512 == sha256.Size
	if !has && size%512 != 0 {
		return false, nil, fmt.Errorf("%s: %w: its size, %d bytes, is neither a bbolt database's (a whole number of pages) nor one followed by etcd's SHA-256 (32 more bytes); cut off, or not an etcd snapshot", path, ErrNotEtcd, size)
	}
	dbSize := size
	if has {
		dbSize -= sha256.Size
	}
	h := sha256.New()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return false, nil, err
	}
	if _, err := io.CopyN(h, f, dbSize); err != nil {
		return false, nil, err
	}
	got := h.Sum(nil)
	if !has {
		return false, got, nil
	}
	want := make([]byte, sha256.Size)
	if _, err := f.ReadAt(want, dbSize); err != nil {
		return false, nil, err
	}
	if !bytes.Equal(got, want) {
		return false, nil, fmt.Errorf("%s: %w: checksum mismatch: the SHA-256 of its %d bytes of database is %x, the file records %x; take the snapshot again", path, ErrDamaged, dbSize, got, want)
	}
	return true, got, nil
}

// Import reads the etcd snapshot at path into db, which must hold no
// state: every version of its key bucket, its compact revision and its
// leases, each key attached to its lease. The file's SHA-256 is checked
// first when it has one (a file copied from a member's data dir has
// none); a file that is not an etcd database is refused with
// ErrNotEtcd, one whose checksum or records are wrong with ErrDamaged.
func Import(path string, db *pebble.DB) (Info, error) {
	var info Info
	has, sum, err := checkSum(path)
	if err != nil {
		return info, err
	}
	info.Checksum, info.SHA256 = has, hex.EncodeToString(sum)
	bdb, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: 2 * time.Second})
	if err != nil {
		return info, fmt.Errorf("%s: %w: bbolt cannot open it: %v", path, ErrNotEtcd, err)
	}
	defer bdb.Close()
	ld, err := mvcc.NewLoader(db)
	if err != nil {
		return info, err
	}
	damaged := func(format string, a ...any) error {
		return fmt.Errorf("%s: %w: %s", path, ErrDamaged, fmt.Sprintf(format, a...))
	}
	err = bdb.View(func(tx *bolt.Tx) error {
		// bbolt's own consistency check of its pages, as etcdctl
		// snapshot status runs it: it is all a file without etcd's
		// checksum is checked with.
		var bad error
		for err := range tx.Check() { // drained: the checker sends every error
			if bad == nil {
				bad = err
			}
		}
		if bad != nil {
			return fmt.Errorf("%s: %w: bbolt finds its pages inconsistent: %v", path, ErrDamaged, bad)
		}
		kb, mb := tx.Bucket(bucketKey), tx.Bucket(bucketMeta)
		if kb == nil || mb == nil {
			return fmt.Errorf("%s: %w: it is a bbolt database without etcd's %q and %q buckets", path, ErrNotEtcd, bucketKey, bucketMeta)
		}
		for _, name := range [][]byte{metaFinished, metaScheduled} {
			if v := mb.Get(name); v != nil {
				if len(v) != revBytes {
					return damaged("meta %s is %d bytes, want %d", name, len(v), revBytes)
				}
				info.CompactRevision = max(info.CompactRevision, int64(binary.BigEndian.Uint64(v)))
			}
		}
		if ab := tx.Bucket(bucketAuth); ab != nil {
			if v := ab.Get(authEnabledKey); len(v) == 1 && v[0] == 1 {
				info.AuthEnabled = true
			}
		}
		if lb := tx.Bucket(bucketLease); lb != nil {
			err := lb.ForEach(func(k, v []byte) error {
				l := &leasepb.Lease{}
				if len(k) != 8 {
					return damaged("lease key %x is %d bytes, want 8", k, len(k))
				}
				if err := proto.Unmarshal(v, l); err != nil {
					return damaged("lease %x: %v", k, err)
				}
				if l.ID != int64(binary.BigEndian.Uint64(k)) || l.ID <= 0 {
					return damaged("lease under key %x has id %d", k, l.ID)
				}
				ttl := lease.MaxTTLMs
				if l.TTL <= lease.MaxTTLMs/1000 {
					ttl = max(l.TTL*1000, lease.MinTTLMs)
				}
				if ttl != l.TTL*1000 {
					info.ClampedLeases++
				}
				rem := ttl
				if l.RemainingTTL > 0 && l.RemainingTTL*1000 < ttl {
					rem = l.RemainingTTL * 1000
				}
				info.Leases++
				return ld.Lease(lease.Record{ID: l.ID, TTLMs: ttl, RemainingMs: rem, Epoch: 1})
			})
			if err != nil {
				return err
			}
		}
		c := kb.Cursor()
		kv := &mvccpb.KeyValue{}
		var ver mvcc.Version
		for k, v := c.First(); k != nil; k, v = c.Next() {
			tomb := len(k) == revBytes+1 && k[revBytes] == 't'
			if (len(k) != revBytes && !tomb) || k[8] != '_' {
				return damaged("key bucket record %x is not a revision (8 bytes, '_', 8 bytes, and 't' for a delete)", k)
			}
			main, sub := int64(binary.BigEndian.Uint64(k[:8])), int64(binary.BigEndian.Uint64(k[9:17]))
			kv.Reset()
			if err := proto.Unmarshal(v, kv); err != nil {
				return damaged("revision %d.%d: %v", main, sub, err)
			}
			if bytes.HasPrefix(kv.Key, reserved) {
				return fmt.Errorf("%s: key %q at revision %d is in the key space DKV reserves for its named stores (keys from %q on); it cannot be restored into DKV", path, kv.Key, main, storekeys.Reserved)
			}
			ver = mvcc.Version{Key: kv.Key, Rev: main, Sub: sub, Tombstone: tomb}
			if !tomb {
				if kv.ModRevision != main {
					return damaged("key %q recorded at revision %d has mod revision %d", kv.Key, main, kv.ModRevision)
				}
				ver.Value, ver.Create, ver.Version, ver.Lease = kv.Value, kv.CreateRevision, kv.Version, kv.Lease
			}
			if err := ld.Add(&ver); err != nil {
				return fmt.Errorf("%s: %w: %v", path, ErrDamaged, err)
			}
			info.Versions++
		}
		return nil
	})
	if err != nil {
		return info, err
	}
	res, err := ld.Finish(info.CompactRevision)
	if err != nil {
		return info, err
	}
	info.Revision, info.Keys, info.Unleased = res.Revision, res.Keys, res.Unleased
	return info, nil
}
