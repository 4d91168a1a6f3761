package restore

import (
	"archive/tar"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/dkv-io/dkv/internal/backup"
	"github.com/dkv-io/dkv/internal/backup/etcdsnap"
	"github.com/dkv-io/dkv/internal/keys"
	"github.com/dkv-io/dkv/internal/mvcc"
)

// Contents is what a checkpoint holds.
type Contents struct {
	Revision, CompactRevision int64
	AppliedIndex              uint64
	KeyCount                  int64
}

// Inspect opens the Pebble checkpoint in dir read-only and reads what it
// holds.
func Inspect(dir string) (Contents, error) {
	db, err := pebble.Open(dir, &pebble.Options{ReadOnly: true, Logger: quietLog{}})
	if err != nil {
		return Contents{}, fmt.Errorf("open checkpoint %s: %w", dir, err)
	}
	defer db.Close()
	var c Contents
	if c.Revision, err = readU64(db, keys.MVCCRevision); err != nil {
		return c, err
	}
	if c.CompactRevision, err = readU64(db, keys.MVCCCompact); err != nil {
		return c, err
	}
	ai, err := readU64(db, keys.AppliedIndex)
	if err != nil {
		return c, err
	}
	c.AppliedIndex = uint64(ai)
	c.KeyCount, err = mvcc.CountLive(db, nil, nil)
	return c, err
}

func readU64(r pebble.Reader, k []byte) (int64, error) {
	v, closer, err := r.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0, fmt.Errorf("%s is %d bytes, want 8", k, len(v))
	}
	return int64(binary.BigEndian.Uint64(v)), nil
}

func prefixEnd(p []byte) []byte {
	e := append([]byte(nil), p...)
	e[len(e)-1]++
	return e
}

// quietLog drops Pebble's informational messages (the WAL replay of a
// checkpoint opened read-only is reported on every open) and passes its
// errors on.
type quietLog struct{}

func (quietLog) Infof(string, ...any)           {}
func (quietLog) Errorf(format string, a ...any) { pebble.DefaultLogger.Errorf(format, a...) }
func (quietLog) Fatalf(format string, a ...any) { pebble.DefaultLogger.Errorf(format, a...) }

// RestoreOptions say which member of which new cluster a data dir is
// built for.
type RestoreOptions struct {
	DataDir string
	// Name is this member's name; InitialCluster the new cluster's
	// members, "n1=host:port,n2=...", as 'dkv serve --initial-cluster'
	// will be given.
	Name           string
	InitialCluster string
	// Token is the new cluster's --initial-cluster-token, if any.
	Token string
}

// Restore meta keys, read by the server's bootstrap (r/meta/<name>).
const (
	MetaRestoredClusterID      = "restored_cluster_id"
	MetaRestoredInitialCluster = "restored_initial_cluster"
	MetaRestoredName           = "restored_name"
)

// NormalizeInitialCluster sorts "name=url" entries, so two spellings of
// one membership compare equal.
func NormalizeInitialCluster(s string) (string, []string, error) {
	var parts, names []string
	seen := map[string]bool{}
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		name, url, ok := strings.Cut(p, "=")
		if !ok || name == "" || url == "" {
			return "", nil, fmt.Errorf("initial cluster entry %q is not name=host:port", p)
		}
		if seen[name] {
			return "", nil, fmt.Errorf("initial cluster names %q twice", name)
		}
		seen[name] = true
		parts = append(parts, name+"="+url)
		names = append(names, name)
	}
	sort.Strings(parts)
	return strings.Join(parts, ","), names, nil
}

// Restore builds opts.DataDir from the backup at path: the backup's
// replicated state (keys, history, revision, leases, locks, users), with
// no raft log, no members and no alarms, and a cluster id of its own
// derived from the backup, the membership and the token, so every member
// restored from the same backup for the same membership gets the same
// one and it differs from the original cluster's. 'dkv serve' with the
// same --name and --initial-cluster then bootstraps the new cluster over
// that state. A data dir that exists and is not empty is refused.
func Restore(path string, opts RestoreOptions) (backup.Meta, error) {
	norm, err := opts.prepare()
	if err != nil {
		return backup.Meta{}, err
	}
	data, meta, closeFn, err := backup.OpenData(path)
	if err != nil {
		return backup.Meta{}, err
	}
	defer closeFn()
	cid, err := build(opts, norm, func(dir string) (*pebble.DB, string, error) {
		if err := extract(data, dir); err != nil {
			return nil, "", fmt.Errorf("unpack %s: %w", path, err)
		}
		db, err := pebble.Open(dir, &pebble.Options{Logger: quietLog{}})
		if err != nil {
			return nil, "", fmt.Errorf("open the restored database: %w", err)
		}
		return db, meta.FileSHA256, nil
	})
	if err != nil {
		return backup.Meta{}, err
	}
	meta.ClusterID = strconv.FormatUint(cid, 10)
	return meta, nil
}

// RestoreEtcd builds opts.DataDir from the etcd snapshot at path (a
// file 'etcdctl snapshot save' wrote, or a member's member/snap/db), as
// Restore builds it from a backup: the snapshot's keys with their
// history, revisions, compact revision and leases (package etcdsnap),
// and a cluster id derived from the file, the membership and the token.
// It returns what the file held and the new cluster's id.
func RestoreEtcd(path string, opts RestoreOptions) (etcdsnap.Info, string, error) {
	norm, err := opts.prepare()
	if err != nil {
		return etcdsnap.Info{}, "", err
	}
	// The file is checked before the data dir is made.
	if _, err := os.Stat(path); err != nil {
		return etcdsnap.Info{}, "", err
	}
	var info etcdsnap.Info
	cid, err := build(opts, norm, func(dir string) (*pebble.DB, string, error) {
		db, err := pebble.Open(dir, &pebble.Options{Logger: quietLog{}, FormatMajorVersion: pebble.FormatNewest})
		if err != nil {
			return nil, "", fmt.Errorf("create the database: %w", err)
		}
		if info, err = etcdsnap.Import(path, db); err != nil {
			db.Close()
			return nil, "", err
		}
		return db, "etcd\x00" + info.SHA256, nil
	})
	if err != nil {
		return etcdsnap.Info{}, "", err
	}
	return info, strconv.FormatUint(cid, 10), nil
}

// prepare checks opts and that the data dir is new or empty, and
// returns the normalized initial cluster.
func (opts RestoreOptions) prepare() (string, error) {
	if opts.Name == "" || opts.InitialCluster == "" || opts.DataDir == "" {
		return "", fmt.Errorf("restore needs --data-dir, --name and --initial-cluster")
	}
	norm, names, err := NormalizeInitialCluster(opts.InitialCluster)
	if err != nil {
		return "", err
	}
	found := false
	for _, n := range names {
		found = found || n == opts.Name
	}
	if !found {
		return "", fmt.Errorf("initial cluster %q does not contain this member's name %q", opts.InitialCluster, opts.Name)
	}
	if ents, err := os.ReadDir(opts.DataDir); err == nil && len(ents) > 0 {
		return "", fmt.Errorf("data dir %s is not empty (%d entries, e.g. %s): restore builds a new member's data dir and never overwrites one; give a new or empty directory", opts.DataDir, len(ents), ents[0].Name())
	} else if err != nil && !os.IsNotExist(err) {
		return "", err
	}
	return norm, nil
}

// build makes opts.DataDir: fill writes the replicated state into it
// and returns the open database and the source's identity (its
// checksum); build then drops what belongs to the old member (its raft
// log, applied index, members, alarms) and records the new cluster,
// whose id derives from the membership, the token and the source. A
// failure leaves the data dir empty.
func build(opts RestoreOptions, norm string, fill func(dir string) (*pebble.DB, string, error)) (uint64, error) {
	if err := os.MkdirAll(opts.DataDir, 0o700); err != nil {
		return 0, err
	}
	fail := func(err error) (uint64, error) {
		// Leave no half-built data dir that dkv serve could start on.
		ents, _ := os.ReadDir(opts.DataDir)
		for _, e := range ents {
			os.RemoveAll(filepath.Join(opts.DataDir, e.Name()))
		}
		return 0, err
	}
	db, source, err := fill(opts.DataDir)
	if err != nil {
		return fail(err)
	}
	b := db.NewBatch()
	// Node-local state (the raft log, HardState, member and cluster ids)
	// belongs to the old member; the new one starts its own log.
	err = b.DeleteRange([]byte{}, keys.StateStart, nil)
	for _, span := range [][2][]byte{
		{keys.AppliedIndex, prefixEnd(keys.AppliedIndex)},
		{keys.ConfState, prefixEnd(keys.ConfState)},
		{keys.MemberPrefix, keys.MemberEnd},
		{keys.AlarmPrefix, keys.AlarmEnd},
	} {
		if err == nil {
			err = b.DeleteRange(span[0], span[1], nil)
		}
	}
	h := fnv.New64a()
	h.Write([]byte("dkv-restored-cluster\x00" + norm + "\x00" + opts.Token + "\x00" + source))
	cid := h.Sum64()
	var cidb [8]byte
	binary.BigEndian.PutUint64(cidb[:], cid)
	for k, v := range map[string][]byte{
		MetaRestoredClusterID:      cidb[:],
		MetaRestoredInitialCluster: []byte(norm),
		MetaRestoredName:           []byte(opts.Name),
	} {
		if err == nil {
			err = b.Set(append(append([]byte(nil), keys.LocalMetaPrefix...), k...), v, nil)
		}
	}
	if err == nil {
		err = b.Commit(pebble.Sync)
	}
	b.Close()
	if err == nil {
		// The deletes are compacted away so the old log does not linger.
		err = db.Compact(context.Background(), []byte{}, keys.StateStart, false)
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fail(fmt.Errorf("rewrite the restored database: %w", err))
	}
	return cid, nil
}

// extract unpacks a tar stream of regular files into dir, refusing any
// name that would land outside it.
func extract(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		name := filepath.Clean(h.Name)
		if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, ".."+string(filepath.Separator)) {
			return fmt.Errorf("archive entry %q is outside the data dir", h.Name)
		}
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, tr)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
}
