package recipe_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/recipe"
)

// TestFlagOpenFeatureTypeNames: OpenFeature's type names (boolean,
// integer, float, object) are accepted and stored as DKV's (bool,
// number, json), so clients that know only DKV's names read the
// document; a document stored with an OpenFeature name (written around
// SetFlag) evaluates too.
func TestFlagOpenFeatureTypeNames(t *testing.T) {
	c := openStore(t)
	fl := newFlags(t, c)
	ctx := context.Background()
	for _, tc := range []struct {
		typ, stored recipe.FlagType
		variants    map[string]string
	}{
		{"boolean", recipe.FlagBool, map[string]string{"on": "true", "off": "false"}},
		{"integer", recipe.FlagNumber, map[string]string{"on": "3", "off": "-1"}},
		{"float", recipe.FlagNumber, map[string]string{"on": "0.5", "off": "1e3"}},
		{"object", recipe.FlagJSON, map[string]string{"on": `{"a":[1]}`, "off": "null"}},
	} {
		f := &recipe.Flag{Key: "of." + string(tc.typ), Type: tc.typ, Enabled: true, DefaultVariant: "on", OffVariant: "off", Variants: map[string]json.RawMessage{}}
		for k, v := range tc.variants {
			f.Variants[k] = json.RawMessage(v)
		}
		setFlag(t, c, fl, f)
		if f.Type != tc.typ {
			t.Errorf("SetFlag changed the caller's type %q to %q", tc.typ, f.Type)
		}
		kv, err := c.Get(ctx, recipe.FlagPrefix+f.Key)
		if err != nil {
			t.Fatal(err)
		}
		var raw struct{ Type string }
		if err := json.Unmarshal(kv.Value, &raw); err != nil || raw.Type != string(tc.stored) {
			t.Errorf("type %q stored as %q (%v), want %q", tc.typ, raw.Type, err, tc.stored)
		}
		d, err := fl.Detail(f.Key, "u", nil, tc.stored)
		if err != nil || d.Type != tc.stored || d.Variant != "on" {
			t.Errorf("Detail(%s, %q) = %+v, %v", f.Key, tc.stored, d, err)
		}
	}

	// Stored with OpenFeature's name: read as DKV's.
	rev := mustPut(t, c, recipe.FlagPrefix+"raw", `{"key":"raw","type":"boolean","variants":{"on":true,"off":false},"defaultVariant":"on","offVariant":"off","enabled":true}`)
	if err := fl.WaitForRevision(ctx, rev); err != nil {
		t.Fatal(err)
	}
	if !fl.Bool("raw", "u", nil, false) {
		t.Error(`a stored "boolean" flag does not evaluate as a bool`)
	}
	if f, err := recipe.GetFlag(ctx, c, "raw"); err != nil || f.Type != recipe.FlagBool {
		t.Errorf("GetFlag of a stored \"boolean\" flag: %+v, %v", f, err)
	}

	// integer is a number whose variants are integers.
	f := &recipe.Flag{Key: "n", Type: "integer", Enabled: true, DefaultVariant: "a", OffVariant: "a",
		Variants: map[string]json.RawMessage{"a": json.RawMessage("2.5")}}
	if err := f.Validate(); !errors.Is(err, client.ErrInvalidInput) || !strings.Contains(err.Error(), `variants["a"]`) || !strings.Contains(err.Error(), "2.5 is not an integer") {
		t.Errorf("integer flag with 2.5: %v", err)
	}
}
