package cli_test

import (
	"testing"

	"github.com/dkv-io/dkv/internal/testutil"
)

// TestCLILinksNoServer: the client commands, like etcdctl, link no
// server, Pebble or raft, and do not import the server-side commands
// (the etcdutl side), which cmd/dkv hands to cli.Main instead. Only this
// package: servercmd below it links the server by design. A failure
// names the edge where a dependency first reaches a server-side package.
func TestCLILinksNoServer(t *testing.T) {
	testutil.LinksNoServer(t, ".",
		"internal/cli holds the client commands and must not link the server, Pebble or raft; commands that open a data dir or run a node go in internal/cli/servercmd",
		"github.com/dkv-io/dkv/internal/cli/servercmd")
}
