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

// build is one binary built for the test binary's life.
type build struct {
	once sync.Once
	path string
	err  error
}

var (
	buildsMu sync.Mutex
	builds   = map[string]*build{} // by package and race mode
)

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
	return BuildMain("./cmd/dkv", race)
}

// MainBinary returns the path of the main package pkg of the dkv module
// (a path relative to the module's root, "./examples/reconcile"), built
// once per test binary as DKVBinary builds cmd/dkv: for a test that runs
// a program as real processes.
func MainBinary(t testing.TB, pkg string) string {
	t.Helper()
	bin, err := BuildMain(pkg, false)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// BuildMain is MainBinary for a TestMain; race as for BuildDKV.
func BuildMain(pkg string, race bool) (string, error) {
	key := fmt.Sprintf("%s race=%v", pkg, race)
	buildsMu.Lock()
	b := builds[key]
	if b == nil {
		b = &build{}
		builds[key] = b
	}
	buildsMu.Unlock()
	b.once.Do(func() { b.path, b.err = buildMain(pkg, race) })
	return b.path, b.err
}

func buildMain(pkg string, race bool) (string, error) {
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
