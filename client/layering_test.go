package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// serverSide are the packages a program that only talks to a remote
// cluster must not link: the server (the embedded mode is server/embed
// for this reason), Pebble, raft, and the replicated state and its
// storage.
var serverSide = []string{
	"github.com/dkv-io/dkv/server",
	"github.com/cockroachdb/pebble",
	"go.etcd.io/raft",
	"github.com/dkv-io/dkv/internal/raftnode",
	"github.com/dkv-io/dkv/internal/storage",
	"github.com/dkv-io/dkv/internal/state",
	"github.com/dkv-io/dkv/internal/mvcc",
}

// TestClientLinksNoServer: no package under client/ depends, directly or
// not, on a server-side package (tests may: they start nodes). A failure
// names the edge where a client-side dependency first reaches one.
func TestClientLinksNoServer(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}\t{{join .Imports \" \"}}", "./...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps ./...: %v\n%s", err, out)
	}
	deps := 0
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, "\t")
		deps++
		if isServerSide(pkg) {
			continue // reported where the client side first reaches it
		}
		for _, imp := range strings.Fields(imports) {
			if isServerSide(imp) {
				t.Errorf("%s imports %s: client/ must not link the server, Pebble or raft", pkg, imp)
			}
		}
	}
	if deps < 10 {
		t.Fatalf("go list found only %d packages; is the test running in client/?\n%s", deps, out)
	}
}

func isServerSide(pkg string) bool {
	for _, p := range serverSide {
		if pkg == p || strings.HasPrefix(pkg, p+"/") {
			return true
		}
	}
	return false
}
