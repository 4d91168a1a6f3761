package cli_test

import (
	"strings"
	"testing"
)

// TestCLIStores is `dkv store` end to end: create, use with --store and
// DKV_STORE, list, stats, a quota refusal, and delete (refused for a
// store with keys unless --force).
func TestCLIStores(t *testing.T) {
	n := startNode(t, t.TempDir())

	n.fails(3, "Error: NotFound: store \"orders\" does not exist (dkv store create orders)", "--store", "orders", "put", "k", "v")
	n.ok("", "store", "create", "orders", "--max-keys", "2")
	n.ok("", "store", "create", "audit")
	n.fails(4, "Error: Conflict:", "store", "create", "orders")
	n.fails(6, "Error: InvalidInput:", "store", "create", "Bad/Name")

	n.ok("", "--store", "orders", "put", "k", "in-orders")
	if r := n.dkvEnv([]string{"DKV_STORE=audit"}, "put", "k", "in-audit"); r.code != 0 {
		t.Fatalf("put with DKV_STORE: %+v", r)
	}
	n.ok("", "put", "k", "in-default")
	for _, c := range []struct{ store, want string }{{"orders", "in-orders"}, {"audit", "in-audit"}, {"", "in-default"}} {
		if got := n.ok("", "--store", c.store, "get", "k"); got != c.want+"\n" {
			t.Errorf("get k in store %q printed %q, want %q", c.store, got, c.want)
		}
	}

	n.ok("", "--store", "orders", "put", "k2", "v")
	n.fails(10, `Error: NoSpace: store "orders" is at its quota of 2 keys`, "--store", "orders", "put", "k3", "v")
	n.ok("", "--store", "audit", "put", "k3", "v") // the other store keeps writing

	if got := n.ok("", "store", "stats", "orders"); !strings.Contains(got, "keys: 2 (max 2)") || !strings.Contains(got, "bytes: 13 (max -)") {
		t.Errorf("stats printed %q", got)
	}
	list := n.ok("", "store", "list")
	if !strings.Contains(list, "audit") || !strings.Contains(list, "orders") || strings.Index(list, "audit") > strings.Index(list, "orders") {
		t.Errorf("list printed %q", list)
	}
	n.ok("", "store", "set-quota", "orders", "--max-keys", "3")
	n.ok("", "--store", "orders", "put", "k3", "v")

	n.fails(4, `Error: Conflict: store "orders" has 3 keys`, "store", "delete", "orders")
	if got := n.ok("", "store", "delete", "orders", "--force"); got != "Store orders deleted (3 keys)\n" {
		t.Errorf("delete --force printed %q", got)
	}
	n.fails(3, "Error: NotFound:", "--store", "orders", "get", "k")
	n.fails(3, "Error: NotFound:", "store", "stats", "orders")
	// Recreated, the store starts empty.
	n.ok("", "store", "create", "orders")
	n.fails(3, "Error: NotFound:", "--store", "orders", "get", "k")
	if got := n.ok("", "get", "k"); got != "in-default\n" {
		t.Errorf("default store's k after deleting orders: %q", got)
	}
}
