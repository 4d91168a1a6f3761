package restore

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dkv-io/dkv/internal/backup"
)

// writeTestBackup writes an intact backup file holding one small file.
func writeTestBackup(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "b.snap")
	w, err := backup.Create(path)
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
	if err := w.Finish(backup.Meta{Revision: 42, KeyCount: 7, MemberName: "n1"}); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRestoreRefusesANonEmptyDataDir(t *testing.T) {
	dir := t.TempDir()
	path := writeTestBackup(t, dir)
	data := filepath.Join(dir, "data")
	os.MkdirAll(data, 0o700)
	os.WriteFile(filepath.Join(data, "MANIFEST-000001"), []byte("x"), 0o600)
	_, err := Restore(path, RestoreOptions{DataDir: data, Name: "n1", InitialCluster: "n1=127.0.0.1:1"})
	if err == nil || !strings.Contains(err.Error(), "is not empty") {
		t.Fatalf("restore into a non-empty dir: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(data, "MANIFEST-000001")); string(b) != "x" {
		t.Fatal("the refused restore touched the data dir")
	}
	_, err = Restore(path, RestoreOptions{DataDir: filepath.Join(dir, "d2"), Name: "n9", InitialCluster: "n1=127.0.0.1:1"})
	if err == nil || !strings.Contains(err.Error(), `does not contain this member's name "n9"`) {
		t.Fatalf("restore for a member not in the cluster: %v", err)
	}
}
