package testutil

import (
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
)

// FreeAddr returns a loopback address with a currently free port.
//
// A port from the kernel's ephemeral range could be handed to some
// client's outgoing connection between this check and the node binding it
// (seen as "address already in use" under parallel test packages), so the
// address is a random one in 127.0.0.0/8 with a port below that range.
func FreeAddr(t testing.TB) string {
	t.Helper()
	for range 100 {
		addr := fmt.Sprintf("127.%d.%d.%d:%d", 1+rand.IntN(254), rand.IntN(256), 1+rand.IntN(254), 20000+rand.IntN(12000))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		l.Close()
		return addr
	}
	t.Fatal("no free loopback address found")
	return ""
}
