package cli_test

import (
	"strings"
	"testing"

	"github.com/dkv-io/dkv/internal/cli/clitest"
)

// TestCLIAuth walks the enable flow of docs/security.md with the real binary:
// users, roles, a prefix permission, auth enable refused until root
// exists, then the exit codes of refused calls.
func TestCLIAuth(t *testing.T) {
	n := clitest.StartServe(t, t.TempDir(), "--auth-bcrypt-cost", "4")
	n.OK("", "user", "add", "root", "--password", "rootpw")
	n.Fails(6, "Error: InvalidInput: auth enable needs a user \"root\" holding the role \"root\"", "auth", "enable")
	n.OK("", "user", "grant-role", "root", "root")
	n.OK("", "role", "add", "app")
	n.OK("", "role", "grant-permission", "app", "readwrite", "app/", "--prefix")
	n.OK("alicepw\n", "user", "add", "alice") // password piped on stdin
	n.OK("", "user", "grant-role", "alice", "app")
	if got := n.OK("", "role", "get", "app"); !strings.Contains(got, `readwrite	["app/", "app0")`) {
		t.Fatalf("role get app printed %q", got)
	}
	if got := n.OK("", "user", "get", "alice"); got != "User: alice\nRoles: app\n" {
		t.Fatalf("user get alice printed %q", got)
	}
	if got := n.OK("", "auth", "enable"); got != "Authentication Enabled\n" {
		t.Fatalf("auth enable printed %q", got)
	}

	n.Fails(13, "Error: Unauthenticated: auth is enabled and the call carries no token", "get", "app/a")
	n.Fails(13, "Error: Unauthenticated: wrong user name or password", "--user", "alice:nope", "get", "app/a")
	// --user without a password and no terminal to ask on: the message
	// names only ways that exist (there is no global --password).
	r0 := n.Fails(2, "Error: usage: no password given and stdin is not a terminal: use --user NAME:PASSWORD or set DKV_PASSWORD", "--user", "alice", "get", "app/a")
	if strings.Contains(r0.Stderr, "--password") {
		t.Fatalf("the login hint names --password, which dkv get does not take: %q", r0.Stderr)
	}
	n.OK("", "--user", "alice:alicepw", "put", "app/a", "1")
	if got := n.OK("", "--user", "alice:alicepw", "get", "app/a"); got != "1\n" {
		t.Fatalf("alice get app/a printed %q", got)
	}
	n.Fails(12, `Error: PermissionDenied: user "alice" lacks read permission on key "other/x"`, "--user", "alice:alicepw", "get", "other/x")
	n.Fails(12, `Error: PermissionDenied: user "alice" lacks the role "root"`, "--user", "alice:alicepw", "user", "list")
	// DKV_USER and DKV_PASSWORD work like --user.
	r := n.DKVEnv([]string{"DKV_USER=root", "DKV_PASSWORD=rootpw"}, "user", "list")
	if r.Code != 0 || r.Stdout != "alice\nroot\n" {
		t.Fatalf("user list as root via env: exit %d, %q %q", r.Code, r.Stdout, r.Stderr)
	}
	if got := n.OK("", "--user", "root:rootpw", "auth", "status"); !strings.HasPrefix(got, "Authentication Status: true\n") {
		t.Fatalf("auth status printed %q", got)
	}
	n.OK("", "--user", "root:rootpw", "auth", "disable")
	n.OK("", "get", "app/a")
}
