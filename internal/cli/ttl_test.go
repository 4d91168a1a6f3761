package cli_test

import (
	"testing"

	"github.com/dkv-io/dkv/internal/cli/clitest"
)

// TestTTLBounds: every TTL the CLI takes is a lease's, 1s to 1 year, and
// a value outside that (0 included: a key without a TTL is a put
// without --ttl) is a usage error naming what the user typed and the
// bounds, the same for put, lease grant, lock and elect; nothing is
// written.
func TestTTLBounds(t *testing.T) {
	n := clitest.StartServe(t, t.TempDir())
	for _, v := range []string{"0s", "0", "500ms", "-5s", "-5", "100000h", "999999999999"} {
		want := "Error: usage: --ttl " + v + ": a TTL must be from 1s to 8760h (1 year)"
		n.Fails(2, want, "put", "k", "v", "--ttl", v)
		n.Fails(2, want, "lock", "job", "--ttl", v, "--", "true")
		n.Fails(2, want, "elect", "svc", "me", "--ttl", v)
		n.Fails(2, "Error: usage: TTL "+v+": a TTL must be from 1s to 8760h (1 year)", "lease", "grant", "--", v)
	}
	n.Fails(2, `Error: usage: --ttl "soon" is not a duration (e.g. 10s, 2m)`, "put", "k", "v", "--ttl", "soon")
	n.Fails(3, "Error: NotFound:", "get", "k")
	if got := n.OK("", "put", "k", "v", "--ttl", "1s"); got[:3] != "OK\n" {
		t.Fatalf("put --ttl 1s printed %q", got)
	}
	if got := n.OK("", "lease", "grant", "8760h"); len(got) == 0 {
		t.Fatal("lease grant 8760h printed nothing")
	}
}
