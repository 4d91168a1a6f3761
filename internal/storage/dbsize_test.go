package storage

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// The size the quota and 'dkv status' see is the size on disk, also after
// a restart: large values live in blob files, which Pebble's metrics stop
// counting once the database is reopened (a 345 MiB store read 29.5 MiB).
func TestDBSizeCountsBlobFilesAfterReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(1))
	val := make([]byte, 64<<10) // random: compression cannot shrink it
	for i := 0; i < 160; i++ {  // 10 MiB of values
		rng.Read(val)
		if err := s.DB().Set(fmt.Appendf(nil, "s/test/%05d", i), val, pebble.NoSync); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DB().Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	var blobs uint64
	names, err := s.rawFS.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if strings.HasSuffix(name, ".blob") {
			fi, err := s.rawFS.Stat(s.rawFS.PathJoin(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			blobs += uint64(fi.Size())
		}
	}
	if blobs < 10<<20 {
		t.Fatalf("blob files hold %d bytes; the test needs the values separated into them", blobs)
	}
	du, err := s.DiskUsage()
	if err != nil {
		t.Fatal(err)
	}
	if du.LiveBytes < blobs {
		t.Errorf("after reopen the database's size is %s, less than its blob files alone (%s): the quota would not see them",
			FormatBytes(du.LiveBytes), FormatBytes(blobs))
	}
}
