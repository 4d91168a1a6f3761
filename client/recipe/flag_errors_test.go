package recipe_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/recipe"
)

// TestFlagValidationNamesTheField: every check of a flag document
// refuses with InvalidInput and a message naming the flag, the field
// (as a path into the JSON document), the value given and the limit, so
// an operator can find the mistake without reading the code.
func TestFlagValidationNamesTheField(t *testing.T) {
	mod := func(f func(*recipe.Flag)) *recipe.Flag { x := boolFlag("k"); f(x); return x }
	rule := func(r recipe.FlagRule) *recipe.Flag {
		return mod(func(f *recipe.Flag) {
			f.Rules = []recipe.FlagRule{{Attribute: "a", Op: "eq", Values: []string{"1"}, Variant: "on"}, r}
		})
	}
	many := func(n int) map[string]json.RawMessage {
		m := map[string]json.RawMessage{}
		for i := range n {
			m[fmt.Sprintf("v%02d", i)] = json.RawMessage("true")
		}
		return m
	}
	for _, tc := range []struct {
		name string
		f    *recipe.Flag
		want string // the whole message after "invalid input: "
	}{
		{"key empty", mod(func(f *recipe.Flag) { f.Key = "" }),
			`flag "": key: empty; a key is 1 to 128 bytes`},
		{"key long", mod(func(f *recipe.Flag) { f.Key = strings.Repeat("k", 129) }),
			`flag "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk…": key: 129 bytes; a key is 1 to 128 bytes`},
		{"key character", mod(func(f *recipe.Flag) { f.Key = "a/b" }),
			`flag "a/b": key: '/' is not allowed; a key has only letters, digits, '.', '_' and '-'`},
		{"type missing", mod(func(f *recipe.Flag) { f.Type = "" }),
			`flag "k": type: missing; it is bool, string, number or json (or OpenFeature's boolean, integer, float or object)`},
		{"type unknown", mod(func(f *recipe.Flag) { f.Type = "int" }),
			`flag "k": type: "int" is not bool, string, number or json (or OpenFeature's boolean, integer, float or object)`},
		{"no variants", mod(func(f *recipe.Flag) { f.Variants = nil }),
			`flag "k": variants: 0 given; a flag has 1 to 64 variants`},
		{"too many variants", mod(func(f *recipe.Flag) { f.Variants = many(65); f.DefaultVariant, f.OffVariant = "v00", "v00" }),
			`flag "k": variants: 65 given; a flag has 1 to 64 variants`},
		{"variant name empty", mod(func(f *recipe.Flag) { f.Variants[""] = json.RawMessage("true") }),
			`flag "k": variants: a name is empty; a variant's name is 1 to 128 bytes`},
		{"variant name long", mod(func(f *recipe.Flag) { f.Variants[strings.Repeat("v", 129)] = json.RawMessage("true") }),
			`flag "k": variants["vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv…"]: the name is 129 bytes; a variant's name is 1 to 128 bytes`},
		{"variant value type", mod(func(f *recipe.Flag) { f.Variants["on"] = json.RawMessage(`"yes"`) }),
			`flag "k": variants["on"]: "yes" is not a bool`},
		{"variant value null", mod(func(f *recipe.Flag) { f.Variants["on"] = json.RawMessage(`null`) }),
			`flag "k": variants["on"]: null is not a bool`},
		{"variant value missing", mod(func(f *recipe.Flag) { f.Variants["on"] = nil }),
			`flag "k": variants["on"]: no value; it must be a bool`},
		{"variant value of the OpenFeature type", mod(func(f *recipe.Flag) { f.Type = "boolean"; f.Variants["on"] = json.RawMessage(`1`) }),
			`flag "k": variants["on"]: 1 is not a boolean`},
		{"variant value long", mod(func(f *recipe.Flag) { f.Variants["on"] = json.RawMessage(`"` + strings.Repeat("x", 100) + `"`) }),
			`flag "k": variants["on"]: "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx… is not a bool`},
		{"integer variant", mod(func(f *recipe.Flag) {
			f.Type = "integer"
			f.Variants = map[string]json.RawMessage{"on": json.RawMessage("1"), "off": json.RawMessage("0.5")}
		}), `flag "k": variants["off"]: 0.5 is not an integer (of at most 2^53 in magnitude)`},
		{"defaultVariant missing", mod(func(f *recipe.Flag) { f.DefaultVariant = "" }),
			`flag "k": defaultVariant: missing; it must be one of the variants (off, on)`},
		{"defaultVariant unknown", mod(func(f *recipe.Flag) { f.DefaultVariant = "blue" }),
			`flag "k": defaultVariant: "blue" is not one of the variants (off, on)`},
		{"offVariant unknown", mod(func(f *recipe.Flag) { f.OffVariant = "of" }),
			`flag "k": offVariant: "of" is not one of the variants (off, on)`},
		{"variant list is shortened", mod(func(f *recipe.Flag) { f.Variants = many(12); f.DefaultVariant, f.OffVariant = "v00", "v99" }),
			`flag "k": offVariant: "v99" is not one of the variants (v00, v01, v02, v03, v04, v05, v06, v07 and 4 more)`},
		{"too many rules", mod(func(f *recipe.Flag) {
			f.Rules = make([]recipe.FlagRule, 65)
		}), `flag "k": rules: 65 given; a flag has at most 64 rules`},
		{"rule attribute", rule(recipe.FlagRule{Op: "eq", Values: []string{"1"}, Variant: "on"}),
			`flag "k": rules[1].attribute: empty; a rule names the attribute it matches`},
		{"rule op missing", rule(recipe.FlagRule{Attribute: "a", Values: []string{"1"}, Variant: "on"}),
			`flag "k": rules[1].op: missing; it is eq, in or not_in`},
		{"rule op unknown", rule(recipe.FlagRule{Attribute: "a", Op: "gt", Values: []string{"1"}, Variant: "on"}),
			`flag "k": rules[1].op: "gt" is not eq, in or not_in`},
		{"eq values", rule(recipe.FlagRule{Attribute: "a", Op: "eq", Values: []string{"1", "2"}, Variant: "on"}),
			`flag "k": rules[1].values: 2 given; eq takes exactly 1`},
		{"in without values", rule(recipe.FlagRule{Attribute: "a", Op: "in", Variant: "on"}),
			`flag "k": rules[1].values: 0 given; in takes 1 to 1024`},
		{"not_in with too many values", rule(recipe.FlagRule{Attribute: "a", Op: "not_in", Values: make([]string, 1025), Variant: "on"}),
			`flag "k": rules[1].values: 1025 given; not_in takes 1 to 1024`},
		{"rule variant", rule(recipe.FlagRule{Attribute: "a", Op: "eq", Values: []string{"1"}, Variant: "blue"}),
			`flag "k": rules[1].variant: "blue" is not one of the variants (off, on)`},
		{"rollout variant", mod(func(f *recipe.Flag) { f.Rollout = &recipe.FlagRollout{Variant: "", Percent: 5} }),
			`flag "k": rollout.variant: missing; it must be one of the variants (off, on)`},
		{"rollout percent", mod(func(f *recipe.Flag) { f.Rollout = &recipe.FlagRollout{Variant: "on", Percent: 120} }),
			`flag "k": rollout.percent: 120 is not in 0..100`},
		{"rollout percent negative", mod(func(f *recipe.Flag) { f.Rollout = &recipe.FlagRollout{Variant: "on", Percent: -0.5} }),
			`flag "k": rollout.percent: -0.5 is not in 0..100`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.f.Validate()
			if !errors.Is(err, client.ErrInvalidInput) {
				t.Fatalf("Validate: %v, want InvalidInput", err)
			}
			if got := strings.TrimPrefix(err.Error(), "invalid input: "); got != tc.want {
				t.Fatalf("Validate:\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestFlagStoreErrorsNameTheField: the checks made when writing or
// reading the store name the field too.
func TestFlagStoreErrorsNameTheField(t *testing.T) {
	c := openStore(t)
	ctx := context.Background()
	big := boolFlag("big")
	big.Variants["on"] = json.RawMessage(`"` + strings.Repeat("x", recipe.MaxFlagDocument) + `"`)
	big.Type = recipe.FlagString
	big.Variants["off"] = json.RawMessage(`""`)
	if _, err := recipe.SetFlag(ctx, c, big); !errors.Is(err, client.ErrInvalidInput) ||
		!strings.Contains(err.Error(), `flag "big": the document is `) || !strings.Contains(err.Error(), "bytes; the limit is 65536") {
		t.Errorf("SetFlag of a big document: %v", err)
	}
	if _, err := recipe.SetFlag(ctx, c, boolFlag("k")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		percent float64
		want    string
	}{
		{120, `flag "k": rollout.percent: 120 is not in 0..100`},
		{10, `flag "k": rollout: none; set one with SetFlag before changing its percent`},
	} {
		if _, err := recipe.SetRollout(ctx, c, "k", tc.percent); !errors.Is(err, client.ErrInvalidInput) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("SetRollout(k, %v): %v, want %q", tc.percent, err, tc.want)
		}
	}
	mustPut(t, c, recipe.FlagPrefix+"moved", `{"key":"elsewhere","type":"bool","variants":{"on":true},"defaultVariant":"on","offVariant":"on"}`)
	mustPut(t, c, recipe.FlagPrefix+"typo", `{"key":"typo","type":"bool","variants":{"on":true},"default":"on","offVariant":"on"}`)
	mustPut(t, c, recipe.FlagPrefix+"wrong", `{"key":"wrong","type":"bool","variants":{"on":true},"defaultVariant":"on","offVariant":"on","rollout":{"variant":"on","percent":"5"}}`)
	mustPut(t, c, recipe.FlagPrefix+"keyless", `{"type":"bool","variants":{"on":true},"defaultVariant":"on","offVariant":"on"}`)
	mustPut(t, c, recipe.FlagPrefix+"huge", `{"key":"huge","rollout":{"variant":"on","percent":1e999}}`)
	mustPut(t, c, recipe.FlagPrefix+"cut", `{"key":"cut",`)
	mustPut(t, c, recipe.FlagPrefix+"syntax", `{"key":"syntax",}`)
	for key, want := range map[string]string{
		"keyless": `flag "keyless": key: missing in the document stored under dkv.flags/keyless`,
		"huge":    `flag "huge": rollout.percent: 1e999 is out of range`,
		"cut":     `flag "cut": not JSON: the document ends early`,
		"syntax":  `flag "syntax": not JSON: invalid character '}' looking for beginning of object key string (at byte 17)`,
		"moved":   `flag "moved": key: "elsewhere" in the document stored under dkv.flags/moved`,
		"typo":    `flag "typo": unknown field "default"; the fields are key, type, variants, defaultVariant, offVariant, enabled, rules (attribute, op, values, variant) and rollout (variant, percent)`,
		"wrong":   `flag "wrong": rollout.percent: a JSON string is not a number`,
	} {
		if _, err := recipe.GetFlag(ctx, c, key); !errors.Is(err, client.ErrInvalidInput) || !strings.Contains(err.Error(), want) {
			t.Errorf("GetFlag(%s): %v, want %q", key, err, want)
		}
	}
}

// TestFlagParse: a document without a key takes the one given; another
// key, or a field of the wrong JSON type, is refused naming the field.
func TestFlagParse(t *testing.T) {
	f, err := recipe.ParseFlag("x", []byte(`{"type":"bool","variants":{"on":true},"defaultVariant":"on","offVariant":"on"}`))
	if err != nil || f.Key != "x" || f.Validate() != nil {
		t.Fatalf("ParseFlag without a key: %+v, %v", f, err)
	}
	for doc, want := range map[string]string{
		`{"key":"other"}`:                    `flag "x": key: "other" in the document, not "x"`,
		`{"enabled":"yes"}`:                  `flag "x": enabled: a JSON string is not true or false`,
		`{"rules":[{"values":[1]}]}`:         `flag "x": rules.values: a JSON number is not a string`,
		`{"variants":["on"]}`:                `flag "x": variants: a JSON array is not an object`,
		`["x"]`:                              `flag "x": the document is a JSON array, not an object`,
		``:                                   `flag "x": the document is empty`,
		`{"rollout":{"variant":"on","p":1}}`: `flag "x": unknown field "p"; the fields are key, type`,
	} {
		if _, err := recipe.ParseFlag("x", []byte(doc)); !errors.Is(err, client.ErrInvalidInput) || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseFlag(%s): %v, want %q", doc, err, want)
		}
	}
}
