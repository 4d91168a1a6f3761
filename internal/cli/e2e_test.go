package cli_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dkv-io/dkv/internal/cli/clitest"
)

func TestMain(m *testing.M) { clitest.Main(m) }

func TestCLIEndToEnd(t *testing.T) {
	n := clitest.StartServe(t, t.TempDir())

	if got := n.OK("", "put", "greeting", "hello"); got != "OK\n" {
		t.Fatalf("put printed %q", got)
	}
	if got := n.OK("", "get", "greeting"); got != "hello\n" {
		t.Fatalf("get printed %q, want the bare value", got)
	}
	// Values from stdin are taken byte for byte.
	n.OK("line1\nline2\n", "put", "multi", "-")
	if got := n.OK("", "get", "multi"); got != "line1\nline2\n\n" {
		t.Fatalf("stdin value read back as %q", got)
	}

	// History: every revision of a key stays readable with --rev.
	var revs []int64
	for _, v := range []string{"v1", "v2", "v3"} {
		out := n.OK("", "-o", "json", "put", "hist", v)
		var rev int64
		if _, err := fmt.Sscanf(out, `{"revision":%d}`, &rev); err != nil {
			t.Fatalf("put -o json printed %q: %v", out, err)
		}
		revs = append(revs, rev)
	}
	for i, rev := range revs {
		if got := n.OK("", "get", "hist", "--rev", strconv.FormatInt(rev, 10)); got != fmt.Sprintf("v%d\n", i+1) {
			t.Fatalf("get --rev %d printed %q", rev, got)
		}
	}
	if got := n.OK("", "-o", "json", "get", "hist"); !strings.Contains(got, `"key":"hist","value":"v3"`) || !strings.Contains(got, `"version":3`) {
		t.Fatalf("get -o json printed %q", got)
	}

	// Prefix listing, keys only, count.
	for _, k := range []string{"p/b", "p/a", "p/c"} {
		n.OK("", "put", k, "val-"+k)
	}
	if got := n.OK("", "get", "p/", "--prefix"); got != "p/a\nval-p/a\np/b\nval-p/b\np/c\nval-p/c\n" {
		t.Fatalf("get --prefix printed %q", got)
	}
	if got := n.OK("", "get", "p/", "--prefix", "--keys-only", "--limit", "2"); got != "p/a\np/b\n" {
		t.Fatalf("get --prefix --keys-only --limit 2 printed %q", got)
	}
	if got := n.OK("", "get", "p/", "--prefix", "--count"); got != "3\n" {
		t.Fatalf("get --count printed %q", got)
	}

	// Conditional puts and their exit codes.
	n.Fails(4, "Error: Conflict: ", "put", "greeting", "again", "--if-absent")
	n.Fails(4, "Error: Conflict: ", "put", "greeting", "again", "--if-version", "7")
	n.OK("", "put", "greeting", "hi", "--if-version", "1")
	if got := n.OK("", "put", "greeting", "hey", "--prev"); got != "OK\ngreeting\nhi\n" {
		t.Fatalf("put --prev printed %q", got)
	}

	// NotFound and InvalidInput.
	n.Fails(3, `Error: NotFound: key "nope" not found`, "get", "nope")
	r := n.Fails(6, "Error: InvalidInput: ", "put", strings.Repeat("k", 5000), "v")
	if !strings.Contains(r.Stderr, "4096") && !strings.Contains(r.Stderr, "4 KiB") {
		t.Fatalf("oversized key message does not name the limit: %q", r.Stderr)
	}
	n.Fails(2, "Error: usage: ", "put", "k")
	n.Fails(2, "Error: usage: --rev -1: it must not be negative (0: the latest revision)", "get", "k", "--rev", "-1")

	// --if-mod-revision: the put applies only if the key was last written
	// at that revision.
	var g struct {
		KVs []struct {
			ModRevision int64 `json:"mod_revision"`
		} `json:"kvs"`
	}
	n.OK("", "put", "cas", "v1")
	if err := json.Unmarshal([]byte(n.OK("", "get", "cas", "-o", "json")), &g); err != nil || len(g.KVs) != 1 {
		t.Fatalf("get cas -o json: %v %+v", err, g)
	}
	rev := fmt.Sprint(g.KVs[0].ModRevision)
	n.Fails(4, "Error: Conflict:", "put", "cas", "v2", "--if-mod-revision", fmt.Sprint(g.KVs[0].ModRevision+1))
	if got := n.OK("", "put", "cas", "v2", "--if-mod-revision", rev); got != "OK\n" {
		t.Fatalf("put --if-mod-revision %s printed %q", rev, got)
	}
	n.Fails(4, "Error: Conflict:", "put", "cas", "v3", "--if-mod-revision", rev)
	if got := n.OK("", "get", "cas"); got != "v2\n" {
		t.Fatalf("after the conditional puts, cas = %q, want v2", got)
	}
	n.Fails(2, "Error: usage: --limit -2: it must not be negative (0: no limit)", "get", "k", "--prefix", "--limit", "-2")

	// Delete.
	if got := n.OK("", "del", "p/", "--prefix"); got != "3\n" {
		t.Fatalf("del --prefix printed %q", got)
	}
	if got := n.OK("", "del", "greeting", "--prev"); got != "1\ngreeting\nhey\n" {
		t.Fatalf("del --prev printed %q", got)
	}
	n.Fails(3, "Error: NotFound: ", "get", "greeting")

	// Counter with bounds.
	if got := n.OK("", "counter", "add", "slots", "2", "--max", "3"); got != "2\n" {
		t.Fatalf("counter printed %q", got)
	}
	n.Fails(4, "Error: Conflict: ", "counter", "add", "slots", "2", "--max", "3")
	if got := n.OK("", "counter", "add", "slots", "-2", "--min", "0"); got != "0\n" {
		t.Fatalf("counter -2 printed %q", got)
	}

	// A compare-and-swap txn from stdin, then the same from a file fails.
	n.OK("", "put", "a", "1")
	txn := `{"compare":[{"key":"a","target":"value","result":"equal","value":"1"}],
		"success":[{"put":{"key":"a","value":"2"}}],
		"failure":[{"get":{"key":"a"}}]}`
	if got := n.OK(txn, "txn"); got != "SUCCESS\nOK\n" {
		t.Fatalf("txn printed %q", got)
	}
	f := filepath.Join(t.TempDir(), "txn.json")
	if err := os.WriteFile(f, []byte(txn), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := n.OK("", "txn", f); got != "FAILURE\na\n2\n" {
		t.Fatalf("second txn printed %q", got)
	}
	if got := n.OK("", "-o", "json", "txn", f); !strings.HasPrefix(got, `{"succeeded":false,`) {
		t.Fatalf("txn -o json printed %q", got)
	}
	n.Fails(2, "Error: usage: txn JSON", "txn", "/dev/null")

	// Compaction makes old revisions unreadable.
	n.OK("", "compact", strconv.FormatInt(revs[2], 10))
	n.Fails(8, "Error: Compacted: ", "get", "hist", "--rev", strconv.FormatInt(revs[0], 10))

	if got := n.OK("", "status"); !strings.Contains(got, "leader:") {
		t.Fatalf("status printed %q", got)
	}
	if got := n.OK("", "-o", "json", "member", "list"); !strings.Contains(got, `"is_leader":true`) {
		t.Fatalf("member list printed %q", got)
	}
}
