package backup

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeTestBackup(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "b.snap")
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	tw.WriteHeader(&tar.Header{Name: "000001.sst", Mode: 0o600, Size: 5, Typeflag: tar.TypeReg})
	tw.Write([]byte("hello"))
	tw.Close()
	if _, err := w.Write(tb.Bytes()); err != nil {
		t.Fatal(err)
	}
	if err := w.Finish(Meta{Revision: 42, KeyCount: 7, MemberName: "n1"}); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestVerifyAcceptsAnIntactFile(t *testing.T) {
	path := writeTestBackup(t, t.TempDir())
	m, err := Verify(path)
	if err != nil {
		t.Fatal(err)
	}
	if m.Revision != 42 || m.KeyCount != 7 || m.MemberName != "n1" || len(m.FileSHA256) != 64 || m.DataBytes == 0 {
		t.Fatalf("meta %+v", m)
	}
	if _, err := os.Stat(path + ".part"); !os.IsNotExist(err) {
		t.Fatalf("the partial file is left: %v", err)
	}
	if _, err := Create(path); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("Create over an existing backup: %v", err)
	}
}

// Every byte of a file is covered: a flip anywhere, or a cut, is refused
// with ErrDamaged and says what is wrong.
func TestVerifyRefusesDamage(t *testing.T) {
	dir := t.TempDir()
	path := writeTestBackup(t, dir)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	check := func(name string, data []byte, want string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Verify(p)
		if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want ErrDamaged with %q", name, err, want)
		}
	}
	for i := range good {
		b := bytes.Clone(good)
		b[i] ^= 0x10
		p := filepath.Join(dir, "flip.snap")
		os.WriteFile(p, b, 0o600)
		if _, err := Verify(p); !errors.Is(err, ErrDamaged) {
			t.Fatalf("byte %d of %d flipped: %v, want ErrDamaged", i, len(good), err)
		}
	}
	check("cut.snap", good[:len(good)-1], "does not end with")
	check("short.snap", good[:20], "too short")
	b := bytes.Clone(good)
	b[len(headMagic)+3] ^= 1
	check("data.snap", b, "checksum mismatch")
}
