package testutil

import (
	"os/exec"
	"strings"
	"testing"
)

// ServerSide are the packages a program that only talks to a remote
// cluster must not link: the server (the embedded mode is server/embed
// for this reason), Pebble, raft, and the replicated state and its
// storage.
var ServerSide = []string{
	"github.com/dkv-io/dkv/server",
	"github.com/cockroachdb/pebble",
	"go.etcd.io/raft",
	"github.com/dkv-io/dkv/internal/raftnode",
	"github.com/dkv-io/dkv/internal/storage",
	"github.com/dkv-io/dkv/internal/state",
	"github.com/dkv-io/dkv/internal/mvcc",
}

// LinksNoServer fails t for each import edge where the packages matching
// pattern (as go list takes it, from the test's directory), or their
// non-test dependencies, first reach a ServerSide package or one of also;
// the message names the edge and ends with why, which says what the
// layering is for. Tests may reach anything: go list -deps leaves their
// imports out.
func LinksNoServer(t testing.TB, pattern, why string, also ...string) {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}\t{{join .Imports \" \"}}", pattern).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pattern, err, out)
	}
	forbidden := append(append([]string(nil), ServerSide...), also...)
	isForbidden := func(pkg string) bool {
		for _, p := range forbidden {
			if pkg == p || strings.HasPrefix(pkg, p+"/") {
				return true
			}
		}
		return false
	}
	deps := 0
	// Split, not SplitSeq: a range-over-func body is a closure, which
	// t.Helper does not cover, and failures would name this file.
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, "\t")
		deps++
		if isForbidden(pkg) {
			continue // reported where the allowed side first reaches it
		}
		for _, imp := range strings.Fields(imports) {
			if isForbidden(imp) {
				t.Errorf("%s imports %s: %s", pkg, imp, why)
			}
		}
	}
	if deps < 10 {
		t.Fatalf("go list -deps %s found only %d packages; is the test running in the right directory?\n%s", pattern, deps, out)
	}
}
