package client_test

import (
	"testing"

	"github.com/dkv-io/dkv/internal/testutil"
)

// TestClientLinksNoServer: no package under client/ depends, directly or
// not, on a server-side package (tests may: they start nodes). A failure
// names the edge where a client-side dependency first reaches one.
func TestClientLinksNoServer(t *testing.T) {
	testutil.LinksNoServer(t, "./...", "client/ must not link the server, Pebble or raft")
}
