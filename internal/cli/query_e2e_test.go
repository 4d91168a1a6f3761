package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/dkv-io/dkv/internal/cli/clitest"
)

// TestCLIQuery: labels on put, a query refused without an index (the
// message names the one to create), served by --scan and then by the
// index, paged at one revision; get -o json shows labels.
func TestCLIQuery(t *testing.T) {
	n := clitest.StartServe(t, t.TempDir())
	n.OK("", "put", "orders/1", "a", "--label", "state=open", "--label", "customer=42")
	n.OK("", "put", "orders/2", "b", "--label", "state=paid", "--label", "customer=42")
	n.OK("", "put", "orders/3", "c", "--label", "state=open", "--label", "customer=7")
	n.OK("", "put", "other/x", "d", "--label", "state=open")

	r := n.Fails(14, "Error: NoIndex:", "query", "prefix=orders/ state=open")
	if !strings.Contains(r.Stderr, "dkv index create orders/ state") {
		t.Fatalf("refusal does not name the index to create: %q", r.Stderr)
	}
	want := "orders/1\na\nlabels: customer=42 state=open\norders/3\nc\nlabels: customer=7 state=open\n"
	if got := n.OK("", "query", "prefix=orders/ state=open", "--scan"); got != want {
		t.Fatalf("query --scan printed %q, want %q", got, want)
	}
	n.OK("", "index", "create", "orders/", "state")
	n.Fails(4, "Error: Conflict:", "index", "create", "orders/", "state")
	if got := n.OK("", "index", "list"); got != "\"orders/\" state 5\n" {
		t.Fatalf("index list printed %q", got)
	}
	if got := n.OK("", "query", "prefix=orders/ state=open"); got != want {
		t.Fatalf("query printed %q, want %q", got, want)
	}
	var jq struct {
		Revision     int64  `json:"revision"`
		Plan         string `json:"plan"`
		Continuation string `json:"continuation"`
		KVs          []struct {
			Key    string            `json:"key"`
			Labels map[string]string `json:"labels"`
		} `json:"kvs"`
	}
	out := n.OK("", "-o", "json", "query", "prefix=orders/ state=open|paid customer=42", "--limit", "1")
	if err := json.Unmarshal([]byte(out), &jq); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	if jq.Plan != "index orders/ state" || len(jq.KVs) != 1 || jq.KVs[0].Key != "orders/1" || jq.Continuation == "" {
		t.Fatalf("first page: %+v", jq)
	}
	// A key that starts matching after the first page is not in the
	// second: every page reads the first page's revision.
	n.OK("", "put", "orders/10", "e", "--label", "state=open", "--label", "customer=42")
	out = n.OK("", "-o", "json", "query", "prefix=orders/ state=open|paid customer=42", "--continue", jq.Continuation, "--limit", "1")
	page1Rev := jq.Revision
	jq.Continuation = ""
	if err := json.Unmarshal([]byte(out), &jq); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	if len(jq.KVs) != 1 || jq.KVs[0].Key != "orders/2" || jq.Continuation != "" || jq.Revision != page1Rev {
		t.Fatalf("second page: %+v (first page at revision %d)", jq, page1Rev)
	}
	if got := n.OK("", "query", "--keys-only", "prefix=orders/ state=open customer=42"); got != "orders/1\norders/10\n" {
		t.Fatalf("query after the new key printed %q", got)
	}

	var got struct {
		KVs []struct {
			Labels map[string]string `json:"labels"`
		} `json:"kvs"`
	}
	out = n.OK("", "-o", "json", "get", "orders/1")
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.KVs) != 1 || got.KVs[0].Labels["state"] != "open" || got.KVs[0].Labels["customer"] != "42" {
		t.Fatalf("get -o json: %s", out)
	}
	n.Fails(6, "Error: InvalidInput:", "put", "orders/x", "v", "--label", "prefix=1")
}

// TestCLIWatchQuery: a watch by query sees keys enter, change within and
// leave the result, in order, and nothing of keys outside it.
func TestCLIWatchQuery(t *testing.T) {
	n := clitest.StartServe(t, t.TempDir())
	n.OK("", "put", "orders/1", "a", "--label", "state=open")
	_, lines := startWatch(t, n, "--query", "prefix=orders/ state=open", "--snapshot")
	expectLine(t, lines, "PUT orders/1 a")                    // the snapshot: the watch is established
	n.OK("", "put", "orders/2", "b", "--label", "state=paid") // never matched
	n.OK("", "put", "orders/2", "b2", "--label", "state=open")
	expectLine(t, lines, "ENTER orders/2 b2")
	n.OK("", "put", "orders/2", "b3", "--label", "state=open", "--label", "rush=yes")
	expectLine(t, lines, "CHANGE orders/2 b3")
	n.OK("", "put", "other/1", "x", "--label", "state=open") // outside the prefix
	n.OK("", "put", "orders/1", "a2", "--label", "state=paid")
	expectLine(t, lines, "LEAVE orders/1")
	n.OK("", "del", "orders/2")
	expectLine(t, lines, "LEAVE orders/2")
	n.OK("", "put", "orders/3", "c", "--label", "state=open")
	expectLine(t, lines, "ENTER orders/3 c")
}
