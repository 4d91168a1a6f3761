package backup

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"time"
)

const (
	headMagic  = "DKVSNAP1"
	tailMagic  = "DKVSEND1"
	footerSize = 8 + 8 + sha256.Size + 8
	// maxMetaBytes bounds the metadata a reader accepts.
	maxMetaBytes = 1 << 20
)

// Meta is what a backup file says about itself.
type Meta struct {
	Format          int       `json:"format"`
	Revision        int64     `json:"revision"`
	CompactRevision int64     `json:"compact_revision"`
	AppliedIndex    uint64    `json:"applied_index"`
	KeyCount        int64     `json:"key_count"`
	MemberID        string    `json:"member_id"` // decimal, as dkv prints ids
	MemberName      string    `json:"member_name"`
	ClusterID       string    `json:"cluster_id"`
	Created         time.Time `json:"created"`
	ServerVersion   string    `json:"server_version"`
	// DataBytes and DataSHA256 describe the tar archive: the bytes the
	// member sent, whose SHA-256 it computed as it sent them.
	DataBytes  int64  `json:"data_bytes"`
	DataSHA256 string `json:"data_sha256"`
	// FileSHA256 is filled in by Verify: the checksum over the file.
	FileSHA256 string `json:"-"`
	FileBytes  int64  `json:"-"`
}

// ErrDamaged is wrapped by every refusal of a damaged or cut file.
var ErrDamaged = errors.New("backup file is damaged")

// Writer writes a backup file: Write the tar data, then Finish. The file
// appears under its name only once complete (written to NAME.part, synced,
// renamed).
type Writer struct {
	path string
	f    *os.File
	all  hash.Hash // over the file so far
	data hash.Hash // over the data section
	n    int64
}

// Create starts a backup file at path, which must not exist.
func Create(path string) (*Writer, error) {
	if _, err := os.Lstat(path); err == nil {
		return nil, fmt.Errorf("%s already exists; give a new file name", path)
	}
	f, err := os.OpenFile(path+".part", os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	w := &Writer{path: path, f: f, all: sha256.New(), data: sha256.New()}
	if _, err := w.raw([]byte(headMagic)); err != nil {
		w.Abort()
		return nil, err
	}
	return w, nil
}

func (w *Writer) raw(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.all.Write(p[:n])
	return n, err
}

// Write appends data (the tar stream).
func (w *Writer) Write(p []byte) (int, error) {
	n, err := w.raw(p)
	w.data.Write(p[:n])
	w.n += int64(n)
	return n, err
}

// DataBytes is how much data has been written.
func (w *Writer) DataBytes() int64 { return w.n }

// DataSHA256 is the SHA-256 of the data written so far.
func (w *Writer) DataSHA256() []byte { return w.data.Sum(nil) }

// Finish writes meta (DataBytes and DataSHA256 are set here), the footer,
// syncs and renames the file into place.
func (w *Writer) Finish(meta Meta) error {
	meta.Format = 1
	meta.DataBytes = w.n
	meta.DataSHA256 = hex.EncodeToString(w.data.Sum(nil))
	mb, err := json.Marshal(meta)
	if err != nil {
		w.Abort()
		return err
	}
	var lens [16]byte
	binary.BigEndian.PutUint64(lens[:8], uint64(w.n))
	binary.BigEndian.PutUint64(lens[8:], uint64(len(mb)))
	_, err = w.raw(mb)
	if err == nil {
		_, err = w.raw(lens[:])
	}
	sum := w.all.Sum(nil)
	if err == nil {
		_, err = w.f.Write(append(sum, tailMagic...))
	}
	if err == nil {
		err = w.f.Sync()
	}
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(w.path+".part", w.path)
	}
	if err != nil {
		os.Remove(w.path + ".part")
		return fmt.Errorf("write %s: %w", w.path, err)
	}
	if d, err := os.Open(filepath.Dir(w.path)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// Abort removes the partial file.
func (w *Writer) Abort() {
	w.f.Close()
	os.Remove(w.path + ".part")
}

// damagedError is a refusal of a damaged file; errors.Is(err, ErrDamaged).
type damagedError struct{ path, problem string }

func (e *damagedError) Error() string {
	return fmt.Sprintf("backup file %s is damaged: %s; it cannot be used: take a new backup or use another one", e.path, e.problem)
}

func (e *damagedError) Is(target error) bool { return target == ErrDamaged }

func damaged(path, format string, args ...any) error {
	return &damagedError{path, fmt.Sprintf(format, args...)}
}

// Verify reads the whole file, checks its footer and checksum, and
// returns its metadata. A file that fails is refused with ErrDamaged and
// what was wrong.
func Verify(path string) (Meta, error) {
	f, err := os.Open(path)
	if err != nil {
		return Meta{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Meta{}, err
	}
	size := fi.Size()
	if size < int64(len(headMagic))+footerSize {
		return Meta{}, damaged(path, "%d bytes is too short for a DKV backup (cut off while it was written?)", size)
	}
	head := make([]byte, len(headMagic))
	if _, err := io.ReadFull(f, head); err != nil {
		return Meta{}, err
	}
	if string(head) != headMagic {
		return Meta{}, damaged(path, "it does not start with %q: not a DKV backup, or its start is damaged", headMagic)
	}
	foot := make([]byte, footerSize)
	if _, err := f.ReadAt(foot, size-footerSize); err != nil {
		return Meta{}, err
	}
	if string(foot[footerSize-8:]) != tailMagic {
		return Meta{}, damaged(path, "it does not end with %q: cut off, or its end is damaged", tailMagic)
	}
	n := binary.BigEndian.Uint64(foot[0:8])
	m := binary.BigEndian.Uint64(foot[8:16])
	want := foot[16 : 16+sha256.Size]
	body := size - footerSize + 16 // through the two lengths
	if m > maxMetaBytes || n > uint64(size) || int64(len(headMagic))+int64(n)+int64(m)+16 != body {
		return Meta{}, damaged(path, "its section lengths (data %d, metadata %d bytes) do not add up to its size %d", n, m, size)
	}
	h := sha256.New()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return Meta{}, err
	}
	if _, err := io.CopyN(h, f, body); err != nil {
		return Meta{}, err
	}
	got := h.Sum(nil)
	if !bytes.Equal(got, want) {
		return Meta{}, damaged(path, "checksum mismatch: SHA-256 of its contents is %x, the file records %x", got, want)
	}
	mb := make([]byte, m)
	if _, err := f.ReadAt(mb, int64(len(headMagic))+int64(n)); err != nil {
		return Meta{}, err
	}
	var meta Meta
	if err := json.Unmarshal(mb, &meta); err != nil {
		return Meta{}, damaged(path, "metadata: %v", err)
	}
	if meta.Format != 1 {
		return Meta{}, fmt.Errorf("%s: backup format %d is not one this build reads (1)", path, meta.Format)
	}
	if meta.DataBytes != int64(n) {
		return Meta{}, damaged(path, "metadata says %d data bytes, the file holds %d", meta.DataBytes, n)
	}
	meta.FileSHA256 = hex.EncodeToString(got)
	meta.FileBytes = size
	return meta, nil
}

// OpenData verifies path and returns a reader of its tar data, the
// file's metadata and a function that closes the file.
func OpenData(path string) (io.Reader, Meta, func(), error) {
	meta, err := Verify(path)
	if err != nil {
		return nil, Meta{}, nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, Meta{}, nil, err
	}
	return io.NewSectionReader(f, int64(len(headMagic)), meta.DataBytes), meta, func() { f.Close() }, nil
}
