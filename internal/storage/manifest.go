package storage

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"regexp"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Pebble tolerates a MANIFEST (its list of table files, written as a log
// of version edits) that fails its checksum part-way: it reads the edits
// before the damage, takes the rest for a torn write, opens an older
// version of the database and deletes the table files that version does
// not list. The raft log then had a hole and the node panicked at start
// (raft's MemoryStorage.Append: "missing log entry"). So the current
// MANIFEST's framing is checked before Pebble opens it: a chunk that fails
// its checksum with an intact chunk after it is damage, not a torn write
// (Pebble syncs each edit before writing the next, so a crash can only tear
// the last). A MANIFEST that ends in an incomplete chunk may be a torn
// write and is left to Pebble; the raft log's invariants, checked when it is
// loaded, catch what such a cut lost, and the refusal names the MANIFEST.
//
// The framing is Pebble's record format (pebble/record): 32 KiB blocks of
// chunks, each a 7-byte header (masked CRC-32C of type and payload, payload
// length, type 1-4) and the payload; a chunk never crosses a block and a
// block's last < 7 bytes are padding.

const (
	manifestBlock  = 32 << 10
	manifestHeader = 7
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// manifestTail describes a current MANIFEST that ends in an incomplete
// chunk (a torn write, or the file cut short).
type manifestTail struct {
	path         string
	offset, size int
}

var manifestMarker = regexp.MustCompile(`^marker\.manifest\.(\d+)\.(MANIFEST-\d+)$`)

// currentManifest is the path of the MANIFEST Pebble's marker names as
// current, "" if there is none (a new store).
func currentManifest(fs vfs.FS, dir string) string {
	names, err := fs.List(dir)
	if err != nil {
		return ""
	}
	best, name := uint64(0), ""
	for _, n := range names {
		m := manifestMarker.FindStringSubmatch(n)
		if m == nil {
			continue
		}
		if it, err := strconv.ParseUint(m[1], 10, 64); err == nil && (name == "" || it > best) {
			best, name = it, m[2]
		}
	}
	if name == "" {
		return ""
	}
	return fs.PathJoin(dir, name)
}

// validChunk reports whether an intact chunk starts at p, and where it
// ends.
func validChunk(b []byte, p int) (int, bool) {
	blockEnd := (p/manifestBlock + 1) * manifestBlock
	if p+manifestHeader > len(b) || p+manifestHeader > blockEnd {
		return 0, false
	}
	if t := b[p+6]; t < 1 || t > 4 {
		return 0, false
	}
	end := p + manifestHeader + int(binary.LittleEndian.Uint16(b[p+4:]))
	if end > blockEnd || end > len(b) {
		return 0, false
	}
	c := crc32.Checksum(b[p+6:end], castagnoli)
	masked := (c>>15 | c<<17) + 0xa282ead8
	return end, binary.LittleEndian.Uint32(b[p:]) == masked
}

// checkManifest checks the framing of the current MANIFEST in dir. It
// returns a *DamageError for a MANIFEST damaged in its middle, and the
// tail of one that ends in an incomplete chunk.
func checkManifest(fs vfs.FS, dir string) (*manifestTail, error) {
	path := currentManifest(fs, dir)
	if path == "" {
		return nil, nil
	}
	f, err := fs.Open(path)
	if err != nil {
		if strings.Contains(err.Error(), "no such file") {
			return nil, &DamageError{Dir: dir, File: path, Problem: "the current MANIFEST (Pebble's list of table files) is missing"}
		}
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	b, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	for p := 0; p < len(b); {
		blockEnd := (p/manifestBlock + 1) * manifestBlock
		if blockEnd-p < manifestHeader {
			p = blockEnd // padding
			continue
		}
		if end, ok := validChunk(b, p); ok {
			p = end
			continue
		}
		if after := intactChunkAfter(b, p); after >= 0 {
			return nil, &DamageError{Dir: dir, File: path, Problem: fmt.Sprintf(
				"the MANIFEST (Pebble's list of table files) fails its checksum at byte %d of %d, with intact records after it at byte %d; Pebble would open an older version of the data and delete the table files it does not list",
				p, len(b), after)}
		}
		return &manifestTail{path: path, offset: p, size: len(b)}, nil
	}
	return nil, nil
}

// intactChunkAfter is the offset of an intact chunk after the broken one
// at p, or -1: anywhere in the rest of p's block (the broken header's
// length cannot be trusted), then at the start of each later block.
func intactChunkAfter(b []byte, p int) int {
	blockEnd := min((p/manifestBlock+1)*manifestBlock, len(b))
	for q := p + 1; q+manifestHeader <= blockEnd; q++ {
		if _, ok := validChunk(b, q); ok {
			return q
		}
	}
	for q := blockEnd; q < len(b); q += manifestBlock {
		if _, ok := validChunk(b, q); ok {
			return q
		}
	}
	return -1
}
