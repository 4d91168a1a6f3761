package docs

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

const module = "github.com/dkv-io/dkv/"

// goList runs go list in the module root with args and returns its
// output lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// TestArchitectureTableCoversEveryPackage: docs/architecture.md's package
// table has a row for every package under internal/, server/ and
// client/, and no row for a package that does not exist.
func TestArchitectureTableCoversEveryPackage(t *testing.T) {
	doc, err := os.ReadFile("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	// The table's rows start with "| `pkg`" (several packages may share
	// a row: "| `a`, `b` |").
	rowRE := regexp.MustCompile("(?m)^\\| (`[a-z0-9/._-]+`(?:, `[a-z0-9/._-]+`)*) \\|")
	rows := map[string]bool{}
	for _, m := range rowRE.FindAllStringSubmatch(string(doc), -1) {
		for _, p := range strings.Split(m[1], ", ") {
			rows[strings.Trim(p, "`")] = true
		}
	}
	pkgs := map[string]bool{}
	for _, p := range goList(t, "./internal/...", "./server/...", "./client/...", "./api/...") {
		pkgs[strings.TrimPrefix(p, module)] = true
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	for p := range pkgs {
		if !rows[p] && (strings.HasPrefix(p, "internal/") || strings.HasPrefix(p, "server") || strings.HasPrefix(p, "client")) {
			t.Errorf("package %s has no row in docs/architecture.md's package table", p)
		}
	}
	for r := range rows {
		if strings.Contains(r, "/") && !pkgs[r] && (strings.HasPrefix(r, "internal/") || strings.HasPrefix(r, "server/") || strings.HasPrefix(r, "client/") || strings.HasPrefix(r, "api/")) {
			t.Errorf("docs/architecture.md has a row for %s, which is not a package", r)
		}
	}
}

// layerRules are the dependency rules docs/architecture.md states: the
// packages matching from (a package, or a tree with "/...") must not
// depend, directly or not, on any package in forbidden (each a package
// and everything under it).
var layerRules = []struct {
	from      string
	forbidden []string
	why       string
}{
	{
		from: "./client/...",
		forbidden: []string{module + "server", "github.com/cockroachdb/pebble", "go.etcd.io/raft",
			module + "internal/raftnode", module + "internal/storage", module + "internal/state", module + "internal/mvcc",
			"github.com/grpc-ecosystem/grpc-gateway"},
		why: "a program that talks to a remote cluster links neither the server, Pebble, raft nor the HTTP gateway",
	},
	{
		from: "./internal/cli",
		forbidden: []string{module + "server", "github.com/cockroachdb/pebble", "go.etcd.io/raft",
			module + "internal/raftnode", module + "internal/storage", module + "internal/state", module + "internal/mvcc",
			module + "internal/cli/servercmd"},
		why: "internal/cli holds the client commands, like etcdctl, and links no server, Pebble or raft; commands that run a node or open a data dir go in internal/cli/servercmd, which cmd/dkv hands to cli.Main",
	},
	{
		from: "./internal/proxy",
		forbidden: []string{module + "server", module + "client", "github.com/cockroachdb/pebble", "go.etcd.io/raft",
			module + "internal/raftnode", module + "internal/storage", module + "internal/state", module + "internal/mvcc"},
		why: "dkv proxy runs on application hosts: it relays gRPC and links neither the server nor the client's retry logic, whose behaviour would then be layered on its callers'",
	},
	{
		from:      "./internal/state",
		forbidden: []string{module + "internal/raftnode", module + "server", "github.com/grpc-ecosystem/grpc-gateway"},
		why:       "the state machine knows nothing of raft's loop, the server or the HTTP gateway",
	},
	{
		from:      "./server/grpcapi",
		forbidden: []string{module + "internal/raftnode", module + "internal/transport", module + "internal/backup", "github.com/grpc-ecosystem/grpc-gateway"},
		why:       "the gRPC services see the node only through grpcapi.Node and grpcapi.Admin: not its raft loop, peers, checkpoints and backups, or the HTTP gateway",
	},
	{
		from:      "./internal/mvcc",
		forbidden: []string{module + "internal/queuekeys", module + "client", module + "internal/state"},
		why:       "the MVCC engine knows no recipe's key layout",
	},
	{
		from:      "./api/dkv/v1",
		forbidden: []string{"github.com/grpc-ecosystem/grpc-gateway"},
		why:       "the messages do not link the gateway (api/dkv/v1/dkvgw does)",
	},
}

// TestLayering checks layerRules with go list -deps. A failure names the
// edge where an allowed package first reaches a forbidden one.
func TestLayering(t *testing.T) {
	for _, r := range layerRules {
		t.Run(strings.Trim(r.from, "./"), func(t *testing.T) {
			bad := func(pkg string) bool {
				for _, f := range r.forbidden {
					if pkg == f || strings.HasPrefix(pkg, f+"/") {
						return true
					}
				}
				return false
			}
			lines := goList(t, "-deps", "-f", "{{.ImportPath}}\t{{join .Imports \" \"}}", r.from)
			if len(lines) < 5 {
				t.Fatalf("go list -deps %s found only %d packages", r.from, len(lines))
			}
			for _, line := range lines {
				pkg, imports, _ := strings.Cut(line, "\t")
				if bad(pkg) {
					continue // reported where an allowed package first reaches it
				}
				for _, imp := range strings.Fields(imports) {
					if bad(imp) {
						t.Errorf("%s imports %s: %s", pkg, imp, r.why)
					}
				}
			}
		})
	}
}
