package docs

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/dkv-io/dkv/client/recipe"
	"github.com/dkv-io/dkv/internal/cli"
)

// jsonBlocks returns the ```json blocks of markdown text.
func jsonBlocks(text string) []string {
	var out []string
	var b strings.Builder
	in := false
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		switch line := sc.Text(); {
		case !in && strings.TrimSpace(line) == "```json":
			in = true
			b.Reset()
		case in && strings.TrimSpace(line) == "```":
			in = false
			out = append(out, b.String())
		case in:
			b.WriteString(line + "\n")
		}
	}
	return out
}

// schemaFields are the JSON names of t's stored fields.
func schemaFields(t reflect.Type) []string {
	var out []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}

// TestFlagDocumentExample: the flag document in docs/recipes.md
// ("Feature flags") is the one `dkv flag set --help` shows; the
// validator accepts it; and it has every field of the schema, so a field
// added to recipe.Flag fails here until both show it.
func TestFlagDocumentExample(t *testing.T) {
	src, err := os.ReadFile("recipes.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(src), "\n## Feature flags\n")
	if !ok {
		t.Fatal(`docs/recipes.md has no "## Feature flags" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	blocks := jsonBlocks(section)
	if len(blocks) != 1 {
		t.Fatalf("docs/recipes.md's feature flags section has %d json blocks, want 1", len(blocks))
	}
	docs := blocks[0]

	var out bytes.Buffer
	if code := cli.Run([]string{"flag", "set", "--help"}, strings.NewReader(""), &out, &out); code != 0 {
		t.Fatalf("dkv flag set --help: exit %d\n%s", code, out.String())
	}
	help := out.String()
	i := strings.Index(help, "\n{\n")
	if i < 0 {
		t.Fatalf("dkv flag set --help shows no JSON document:\n%s", help)
	}
	var helpDoc json.RawMessage
	if err := json.NewDecoder(strings.NewReader(help[i:])).Decode(&helpDoc); err != nil {
		t.Fatalf("the document in dkv flag set --help is not JSON: %v", err)
	}

	decoded := map[string]map[string]any{}
	for where, doc := range map[string]string{"docs/recipes.md": docs, "dkv flag set --help": string(helpDoc)} {
		var m map[string]any
		if err := json.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatalf("%s: the flag document is not JSON: %v", where, err)
		}
		key, _ := m["key"].(string)
		f, err := recipe.ParseFlag(key, []byte(doc))
		if err == nil {
			err = f.Validate()
		}
		if err != nil {
			t.Errorf("%s: the flag document is refused: %v", where, err)
		}
		decoded[where] = m

		// Every field of the schema is shown.
		for _, name := range schemaFields(reflect.TypeFor[recipe.Flag]()) {
			if _, ok := m[name]; !ok {
				t.Errorf("%s: the flag document has no %q", where, name)
			}
		}
		rules, _ := m["rules"].([]any)
		if len(rules) == 0 {
			t.Errorf("%s: the flag document has no rule", where)
		}
		for _, name := range schemaFields(reflect.TypeFor[recipe.FlagRule]()) {
			for j, r := range rules {
				if r, _ := r.(map[string]any); r[name] == nil {
					t.Errorf("%s: the flag document's rules[%d] has no %q", where, j, name)
				}
			}
		}
		rollout, _ := m["rollout"].(map[string]any)
		for _, name := range schemaFields(reflect.TypeFor[recipe.FlagRollout]()) {
			if rollout[name] == nil {
				t.Errorf("%s: the flag document's rollout has no %q", where, name)
			}
		}
	}
	if !reflect.DeepEqual(decoded["docs/recipes.md"], decoded["dkv flag set --help"]) {
		t.Errorf("docs/recipes.md and dkv flag set --help show different flag documents:\n%s\n%s", docs, helpDoc)
	}
	// The help explains each top-level field, one per line.
	for _, name := range schemaFields(reflect.TypeFor[recipe.Flag]()) {
		if !strings.Contains(help, "\n  "+name+" ") {
			t.Errorf("dkv flag set --help does not explain %q", name)
		}
	}
}
