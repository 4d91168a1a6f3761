package storage

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// TestFormatGate: a data dir records its storage format (a new one
// FormatRaftLog: its state starts in layout 2); one in FormatValueOnce
// opens; one written by a newer build is refused at open with an error
// naming both formats, and a damaged record is damage, not a silent
// downgrade.
func TestFormatGate(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	if v, ok, err := s.Meta(formatMeta); err != nil || !ok || string(v) != strconv.Itoa(FormatRaftLog) {
		t.Fatalf("format record of a new data dir: %q %v %v, want %d", v, ok, err, FormatRaftLog)
	}
	b := s.DB().NewBatch()
	if err := RecordFormat(b, FormatValueOnce); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir)
	if v, _, err := s.Meta(formatMeta); err != nil || string(v) != strconv.Itoa(FormatValueOnce) {
		t.Fatalf("format record after RecordFormat(%d) and a reopen: %q %v", FormatValueOnce, v, err)
	}
	if err := s.SetMeta(formatMeta, []byte(strconv.Itoa(Format+1))); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := Open(dir, Options{})
	if !errors.Is(err, ErrNewerFormat) || !strings.Contains(err.Error(), fmt.Sprintf("storage format %d", Format+1)) || !strings.Contains(err.Error(), fmt.Sprintf("format %d at most", Format)) {
		t.Fatalf("opening a data dir of a newer format: %v, want ErrNewerFormat naming formats %d and %d", err, Format+1, Format)
	}

	dir = t.TempDir()
	s = open(t, dir)
	if err := s.SetMeta(formatMeta, []byte("x")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err = Open(dir, Options{})
	if !errors.Is(err, ErrDamaged) {
		t.Fatalf("opening a data dir with a damaged format record: %v, want ErrDamaged", err)
	}
}
