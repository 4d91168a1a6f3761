package cli_test

import (
	"strings"
	"testing"

	"github.com/dkv-io/dkv/internal/cli/clitest"
)

// TestCLIStores is `dkv store` end to end: create, use with --store and
// DKV_STORE, list, stats, a quota refusal, and delete (refused for a
// store with keys unless --force).
func TestCLIStores(t *testing.T) {
	n := clitest.StartServe(t, t.TempDir())

	n.Fails(3, "Error: NotFound: store \"orders\" does not exist (dkv store create orders)", "--store", "orders", "put", "k", "v")
	n.OK("", "store", "create", "orders", "--max-keys", "2")
	n.OK("", "store", "create", "audit")
	n.Fails(4, "Error: Conflict:", "store", "create", "orders")
	n.Fails(6, "Error: InvalidInput:", "store", "create", "Bad/Name")

	n.OK("", "--store", "orders", "put", "k", "in-orders")
	if r := n.DKVEnv([]string{"DKV_STORE=audit"}, "put", "k", "in-audit"); r.Code != 0 {
		t.Fatalf("put with DKV_STORE: %+v", r)
	}
	n.OK("", "put", "k", "in-default")
	for _, c := range []struct{ store, want string }{{"orders", "in-orders"}, {"audit", "in-audit"}, {"", "in-default"}} {
		if got := n.OK("", "--store", c.store, "get", "k"); got != c.want+"\n" {
			t.Errorf("get k in store %q printed %q, want %q", c.store, got, c.want)
		}
	}

	n.OK("", "--store", "orders", "put", "k2", "v")
	n.Fails(10, `Error: NoSpace: store "orders" is at its quota of 2 keys`, "--store", "orders", "put", "k3", "v")
	n.OK("", "--store", "audit", "put", "k3", "v") // the other store keeps writing

	if got := n.OK("", "store", "stats", "orders"); !strings.Contains(got, "keys: 2 (max 2)") || !strings.Contains(got, "bytes: 13 (max -)") {
		t.Errorf("stats printed %q", got)
	}
	list := n.OK("", "store", "list")
	if !strings.Contains(list, "audit") || !strings.Contains(list, "orders") || strings.Index(list, "audit") > strings.Index(list, "orders") {
		t.Errorf("list printed %q", list)
	}
	n.OK("", "store", "set-quota", "orders", "--max-keys", "3")
	n.OK("", "--store", "orders", "put", "k3", "v")

	n.Fails(4, `Error: Conflict: store "orders" has 3 keys`, "store", "delete", "orders")
	if got := n.OK("", "store", "delete", "orders", "--force"); got != "Store orders deleted (3 keys)\n" {
		t.Errorf("delete --force printed %q", got)
	}
	n.Fails(3, "Error: NotFound:", "--store", "orders", "get", "k")
	n.Fails(3, "Error: NotFound:", "store", "stats", "orders")
	// Recreated, the store starts empty.
	n.OK("", "store", "create", "orders")
	n.Fails(3, "Error: NotFound:", "--store", "orders", "get", "k")
	if got := n.OK("", "get", "k"); got != "in-default\n" {
		t.Errorf("default store's k after deleting orders: %q", got)
	}
}
