package tests

import (
	"debug/elf"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dkv-io/dkv/server"
)

// TestMakeBuildIsStatic: the Dockerfile copies `make build`'s binary into
// a FROM scratch image, which has no dynamic loader; a dynamically linked
// dkv fails there with "exec /dkv: no such file or directory". The binary
// must have no interpreter and no shared-library dependencies, and report
// the version make stamps into it.
func TestMakeBuildIsStatic(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	bin := filepath.Join(t.TempDir(), "dkv")
	cmd := exec.Command("make", "-s", "build", "BIN="+bin, "VERSION=v9.9.9-test")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("make build produced a dynamically linked binary (it has a PT_INTERP program header): it cannot run in the FROM scratch image")
		}
	}
	if libs, err := f.ImportedLibraries(); err == nil && len(libs) > 0 {
		t.Errorf("make build's binary needs shared libraries %v", libs)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "dkv version v9.9.9-test") {
		t.Errorf("dkv version after make build VERSION=v9.9.9-test printed %q (%v)", out, err)
	}

	// Without VERSION: the server's version, the one dkv status shows,
	// and the commit, as a go build from the checkout reports it.
	cmd = exec.Command("make", "-s", "build", "BIN="+bin)
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "version").CombinedOutput()
	if want := "dkv version " + server.Version + " (commit "; err != nil || !strings.HasPrefix(string(out), want) {
		t.Errorf("dkv version after make build printed %q (%v), want it to start %q", out, err, want)
	}
}
