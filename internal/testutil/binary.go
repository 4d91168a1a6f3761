package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// builds caches one build per package and race mode for the test
// binary's life.
var builds sync.Map // buildKey -> *build

type buildKey struct {
	pkg  string
	race bool
}

type build struct {
	once sync.Once
	path string
	err  error
}

// DKVBinary returns the path of a dkv binary: $DKV_BINARY if set, else
// cmd/dkv built once per test binary, static (CGO_ENABLED=0) like the
// release image, from the main module's directory, so that a test module
// beside it (compat/etcd, tests/browser) builds it with the main module's
// own dependency versions.
func DKVBinary(t testing.TB) string {
	t.Helper()
	bin, err := BuildDKV(false)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// BuildDKV is DKVBinary for a TestMain, which has no t; with race, the
// binary has the race detector (and cgo, which the detector needs), so
// that a CLI test run with -race checks the server it starts too.
func BuildDKV(race bool) (string, error) {
	if b := os.Getenv("DKV_BINARY"); b != "" {
		return b, nil
	}
	return BuildPackage("./cmd/dkv", race)
}

// Binary returns the path of the main package pkg of the main module
// ("./examples/invoices"), built as BuildPackage builds it.
func Binary(t testing.TB, pkg string) string {
	t.Helper()
	bin, err := BuildPackage(pkg, false)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// BuildPackage builds the main package pkg, a path relative to the main
// module's root ("./cmd/dkv"), once per test binary and race mode, into
// a temporary directory, and returns the binary's path. Without race
// the binary is static (CGO_ENABLED=0), like the release image; with
// race it has the race detector (and cgo, which the detector needs).
func BuildPackage(pkg string, race bool) (string, error) {
	v, _ := builds.LoadOrStore(buildKey{pkg, race}, &build{})
	b := v.(*build)
	b.once.Do(func() { b.path, b.err = buildPackage(pkg, race) })
	return b.path, b.err
}

func buildPackage(pkg string, race bool) (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/dkv-io/dkv").Output()
	if err != nil {
		return "", fmt.Errorf("finding the dkv module: %v", err)
	}
	root := strings.TrimSpace(string(out))
	dir, err := os.MkdirTemp("", "dkv-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, path.Base(pkg))
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Dir = root
	if !race {
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s in %s: %v\n%s", strings.Join(cmd.Args[1:], " "), root, err, out)
	}
	return bin, nil
}
