package servertest

import (
	"context"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
)

// Client is a client whose endpoints are the given nodes' client ports,
// in that order (so it tries the first one first), closed when the test
// ends. It does not sync its endpoints from the member list.
func Client(t testing.TB, nodes ...*Node) *client.Client {
	t.Helper()
	var eps []string
	for _, nd := range nodes {
		eps = append(eps, nd.Srv.ClientAddr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Endpoints: eps, AutoSyncInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
