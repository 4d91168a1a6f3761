package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// DKVBinary returns the path of a dkv binary: $DKV_BINARY if set, else
// cmd/dkv built once per test binary, static (CGO_ENABLED=0) like the
// release image, from the main module's directory, so that a test module
// beside it (compat/etcd, tests/browser) builds it with the main module's
// own dependency versions.
func DKVBinary(t testing.TB) string {
	t.Helper()
	if b := os.Getenv("DKV_BINARY"); b != "" {
		return b
	}
	binOnce.Do(func() { binPath, binErr = buildDKV() })
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

func buildDKV() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/dkv-io/dkv").Output()
	if err != nil {
		return "", fmt.Errorf("finding the dkv module: %v", err)
	}
	root := strings.TrimSpace(string(out))
	dir, err := os.MkdirTemp("", "dkv-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "dkv")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/dkv")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/dkv in %s: %v\n%s", root, err, out)
	}
	return bin, nil
}
