package cli_test

import (
	"fmt"
	"strings"
	"testing"
)

// The flag commands: a flag is set from stdin, read, listed, rolled out
// stickily and evaluated with attributes; bad input is refused.
func TestCLIFlag(t *testing.T) {
	n := startNode(t, t.TempDir())
	doc := `{"type":"bool","variants":{"on":true,"off":false},"defaultVariant":"off","offVariant":"off","enabled":true,
		"rules":[{"attribute":"country","op":"in","values":["NO","SE"],"variant":"on"}],
		"rollout":{"variant":"on","percent":5}}`
	if got := n.ok(doc, "flag", "set", "checkout"); !strings.HasPrefix(got, "set checkout revision=") {
		t.Fatalf("set printed %q", got)
	}
	if got := n.ok("", "flag", "get", "checkout"); !strings.Contains(got, `"key": "checkout"`) || !strings.Contains(got, `"percent": 5`) {
		t.Fatalf("get printed %q", got)
	}
	if got := n.ok("", "flag", "evaluate", "checkout", "u1", "--attr", "country=SE"); got != "on true TARGETING_MATCH\n" {
		t.Fatalf("evaluate with a matching rule printed %q", got)
	}
	// Users inside the 5% rollout stay inside at 25%.
	var in5 []string
	for i := 0; len(in5) == 0 && i < 200; i++ {
		u := fmt.Sprintf("user-%d", i)
		if n.ok("", "flag", "evaluate", "checkout", u) == "on true SPLIT\n" {
			in5 = append(in5, u)
		}
	}
	if len(in5) == 0 {
		t.Fatal("no user of 200 inside a 5% rollout")
	}
	if got := n.ok("", "flag", "rollout", "checkout", "25"); !strings.HasPrefix(got, "rollout checkout 25% revision=") {
		t.Fatalf("rollout printed %q", got)
	}
	if got := n.ok("", "flag", "evaluate", "checkout", in5[0]); got != "on true SPLIT\n" {
		t.Fatalf("%s after rolling to 25%% printed %q", in5[0], got)
	}
	if got := n.ok("", "flag", "evaluate", "checkout"); got != "off false DEFAULT\n" {
		t.Fatalf("evaluate without a targeting key printed %q", got)
	}
	// Kill switch (the document sets the rollout back to 5%).
	n.ok(strings.Replace(doc, `"enabled":true`, `"enabled":false`, 1), "flag", "set", "checkout")
	if got := n.ok("", "flag", "evaluate", "checkout", "u1", "--attr", "country=SE"); got != "off false DISABLED\n" {
		t.Fatalf("evaluate of a disabled flag printed %q", got)
	}
	n.ok(`{"type":"string","variants":{"a":"x"},"defaultVariant":"a","offVariant":"a","enabled":true}`, "flag", "set", "name")
	n.ok("", "put", "dkv.flags/bad", `{"key":"bad","type":"bool"}`)
	if got := n.ok("", "flag", "list"); !strings.HasPrefix(got, "bad invalid: ") ||
		!strings.Contains(got, "\ncheckout bool off default=off rollout=on:5%\nname string on default=a\n") {
		t.Fatalf("list printed %q", got)
	}
	if got := n.ok("", "-o", "json", "flag", "evaluate", "name"); got != `{"key":"name","variant":"a","value":"x","reason":"DEFAULT"}`+"\n" {
		t.Fatalf("evaluate -o json printed %q", got)
	}
	r := n.dkv(`{"type":"bool","variants":{"on":"yes"},"defaultVariant":"on","offVariant":"on"}`, "flag", "set", "x")
	if r.code != 6 || !strings.HasPrefix(r.stderr, "Error: InvalidInput:") || !strings.Contains(r.stderr, `variant "on": value "yes" is not a bool`) {
		t.Fatalf("set of a bad document: exit %d stderr %q", r.code, r.stderr)
	}
	r = n.dkv(`{"key":"other","type":"bool"}`, "flag", "set", "x")
	if r.code != 6 || !strings.Contains(r.stderr, `key "other" is not "x"`) {
		t.Fatalf("set with a mismatched key: exit %d stderr %q", r.code, r.stderr)
	}
	n.fails(6, "Error: InvalidInput:", "flag", "rollout", "checkout", "120")
	n.fails(6, "Error: InvalidInput:", "flag", "rollout", "name", "10")
	n.fails(3, "Error: NotFound:", "flag", "get", "nope")
	n.fails(3, "Error: NotFound:", "flag", "evaluate", "nope")
	n.fails(2, "", "flag", "evaluate", "checkout", "--attr", "novalue")
}
