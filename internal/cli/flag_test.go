package cli_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/dkv-io/dkv/internal/cli/clitest"
)

// The flag commands: a flag is set from stdin, read, listed, rolled out
// stickily and evaluated with attributes; bad input is refused.
func TestCLIFlag(t *testing.T) {
	n := clitest.StartServe(t, t.TempDir())
	doc := `{"type":"bool","variants":{"on":true,"off":false},"defaultVariant":"off","offVariant":"off","enabled":true,
		"rules":[{"attribute":"country","op":"in","values":["NO","SE"],"variant":"on"}],
		"rollout":{"variant":"on","percent":5}}`
	if got := n.OK(doc, "flag", "set", "checkout"); !strings.HasPrefix(got, "set checkout revision=") {
		t.Fatalf("set printed %q", got)
	}
	if got := n.OK("", "flag", "get", "checkout"); !strings.Contains(got, `"key": "checkout"`) || !strings.Contains(got, `"percent": 5`) {
		t.Fatalf("get printed %q", got)
	}
	if got := n.OK("", "flag", "evaluate", "checkout", "u1", "--attr", "country=SE"); got != "on true TARGETING_MATCH\n" {
		t.Fatalf("evaluate with a matching rule printed %q", got)
	}
	// Users inside the 5% rollout stay inside at 25%.
	var in5 []string
	for i := 0; len(in5) == 0 && i < 200; i++ {
		u := fmt.Sprintf("user-%d", i)
		if n.OK("", "flag", "evaluate", "checkout", u) == "on true SPLIT\n" {
			in5 = append(in5, u)
		}
	}
	if len(in5) == 0 {
		t.Fatal("no user of 200 inside a 5% rollout")
	}
	if got := n.OK("", "flag", "rollout", "checkout", "25"); !strings.HasPrefix(got, "rollout checkout 25% revision=") {
		t.Fatalf("rollout printed %q", got)
	}
	if got := n.OK("", "flag", "evaluate", "checkout", in5[0]); got != "on true SPLIT\n" {
		t.Fatalf("%s after rolling to 25%% printed %q", in5[0], got)
	}
	if got := n.OK("", "flag", "evaluate", "checkout"); got != "off false DEFAULT\n" {
		t.Fatalf("evaluate without a targeting key printed %q", got)
	}
	// Kill switch (the document sets the rollout back to 5%).
	n.OK(strings.Replace(doc, `"enabled":true`, `"enabled":false`, 1), "flag", "set", "checkout")
	if got := n.OK("", "flag", "evaluate", "checkout", "u1", "--attr", "country=SE"); got != "off false DISABLED\n" {
		t.Fatalf("evaluate of a disabled flag printed %q", got)
	}
	n.OK(`{"type":"string","variants":{"a":"x"},"defaultVariant":"a","offVariant":"a","enabled":true}`, "flag", "set", "name")
	n.OK("", "put", "dkv.flags/bad", `{"key":"bad","type":"bool"}`)
	if got := n.OK("", "flag", "list"); !strings.HasPrefix(got, "bad invalid: variants: 0 given; a flag has 1 to 64 variants\n") ||
		!strings.Contains(got, "\ncheckout bool off default=off rollout=on:5%\nname string on default=a\n") {
		t.Fatalf("list printed %q", got)
	}
	if got := n.OK("", "-o", "json", "flag", "evaluate", "name"); got != `{"key":"name","variant":"a","value":"x","reason":"DEFAULT"}`+"\n" {
		t.Fatalf("evaluate -o json printed %q", got)
	}
	r := n.DKV(`{"type":"bool","variants":{"on":"yes"},"defaultVariant":"on","offVariant":"on"}`, "flag", "set", "x")
	if r.Code != 6 || !strings.HasPrefix(r.Stderr, "Error: InvalidInput:") || !strings.Contains(r.Stderr, `flag "x": variants["on"]: "yes" is not a bool`) {
		t.Fatalf("set of a bad document: exit %d stderr %q", r.Code, r.Stderr)
	}
	r = n.DKV(`{"key":"other","type":"bool"}`, "flag", "set", "x")
	if r.Code != 6 || !strings.Contains(r.Stderr, `flag "x": key: "other" in the document, not "x"`) {
		t.Fatalf("set with a mismatched key: exit %d stderr %q", r.Code, r.Stderr)
	}
	n.Fails(6, `Error: InvalidInput: flag "checkout": rollout.percent: 120 is not in 0..100`, "flag", "rollout", "checkout", "120")
	n.Fails(6, "Error: InvalidInput:", "flag", "rollout", "name", "10")
	n.Fails(3, "Error: NotFound:", "flag", "get", "nope")
	n.Fails(3, "Error: NotFound:", "flag", "evaluate", "nope")
	n.Fails(2, "", "flag", "evaluate", "checkout", "--attr", "novalue")
}

// The document `dkv flag set --help` shows is accepted as it stands,
// and stored as shown: `dkv flag get` prints the same document back.
func TestCLIFlagHelpExample(t *testing.T) {
	n := clitest.StartServe(t, t.TempDir())
	help := n.OK("", "flag", "set", "--help")
	i := strings.Index(help, "\n{\n")
	if i < 0 {
		t.Fatalf("no JSON document in dkv flag set --help:\n%s", help)
	}
	var example json.RawMessage
	if err := json.NewDecoder(strings.NewReader(help[i:])).Decode(&example); err != nil {
		t.Fatalf("the document in dkv flag set --help is not JSON: %v", err)
	}
	var f struct{ Key string }
	if err := json.Unmarshal(example, &f); err != nil || f.Key == "" {
		t.Fatalf("the help's document has no key: %v", err)
	}
	if got := n.OK(string(example), "flag", "set", f.Key); !strings.HasPrefix(got, "set "+f.Key+" revision=") {
		t.Fatalf("set of the help's document printed %q", got)
	}
	var want, got any
	if err := json.Unmarshal(example, &want); err != nil {
		t.Fatal(err)
	}
	printed := n.OK("", "flag", "get", f.Key)
	if err := json.Unmarshal([]byte(printed), &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("get printed another document than the help's:\n%s", printed)
	}

	// OpenFeature's name for the type is accepted and stored as DKV's.
	n.OK(strings.Replace(string(example), `"type": "bool"`, `"type": "boolean"`, 1), "flag", "set", f.Key)
	if got := n.OK("", "flag", "get", f.Key); !strings.Contains(got, `"type": "bool",`) {
		t.Fatalf("a boolean flag was stored as %s", got)
	}
}
