package storage

import (
	"errors"
	"strings"
	"testing"
)

// TestFormatGate: a data dir records its storage format; one written by a
// newer build is refused at open with an error naming both formats, and
// a damaged record is damage, not a silent downgrade.
func TestFormatGate(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	if v, ok, err := s.Meta(formatMeta); err != nil || !ok || string(v) != "1" {
		t.Fatalf("format record of a new data dir: %q %v %v, want \"1\"", v, ok, err)
	}
	if err := s.SetMeta(formatMeta, []byte("2")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := Open(dir, Options{})
	if !errors.Is(err, ErrNewerFormat) || !strings.Contains(err.Error(), "storage format 2") || !strings.Contains(err.Error(), "format 1 at most") {
		t.Fatalf("opening a format-2 data dir: %v, want ErrNewerFormat naming formats 2 and 1", err)
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
