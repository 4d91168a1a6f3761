package openfeature_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client/recipe"
	dkvof "github.com/dkv-io/dkv/contrib/openfeature"
	"github.com/dkv-io/dkv/server/embed"
	of "github.com/open-feature/go-sdk/openfeature"
)

// An application evaluates DKV flags through the OpenFeature client:
// rules, rollout, the kill switch, each type, and the standard errors.
func TestProviderThroughOpenFeature(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := embed.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	flags, err := recipe.NewFlags(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer flags.Close()
	set := func(f *recipe.Flag) {
		t.Helper()
		rev, err := recipe.SetFlag(ctx, c, f)
		if err != nil {
			t.Fatal(err)
		}
		if err := flags.WaitForRevision(ctx, rev); err != nil {
			t.Fatal(err)
		}
	}
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	checkout := &recipe.Flag{Key: "checkout", Type: recipe.FlagBool, Enabled: true,
		Variants: map[string]json.RawMessage{"on": raw("true"), "off": raw("false")}, DefaultVariant: "off", OffVariant: "off",
		Rules:   []recipe.FlagRule{{Attribute: "country", Op: recipe.OpEquals, Values: []string{"NO"}, Variant: "on"}},
		Rollout: &recipe.FlagRollout{Variant: "on", Percent: 100}}
	set(checkout)
	set(&recipe.Flag{Key: "limit", Type: recipe.FlagNumber, Enabled: true,
		Variants: map[string]json.RawMessage{"a": raw("42"), "b": raw("1.5")}, DefaultVariant: "a", OffVariant: "b"})
	set(&recipe.Flag{Key: "cfg", Type: recipe.FlagJSON, Enabled: true,
		Variants: map[string]json.RawMessage{"a": raw(`{"x":"y"}`)}, DefaultVariant: "a", OffVariant: "a"})
	set(&recipe.Flag{Key: "theme", Type: recipe.FlagString, Enabled: true,
		Variants: map[string]json.RawMessage{"d": raw(`"dark"`)}, DefaultVariant: "d", OffVariant: "d"})

	if err := of.SetNamedProviderAndWait("dkv-test", dkvof.New(flags)); err != nil {
		t.Fatal(err)
	}
	cl := of.NewClient("dkv-test")
	d, err := cl.BooleanValueDetails(ctx, "checkout", false, of.NewEvaluationContext("u1", map[string]any{"country": "NO"}))
	if err != nil || !d.Value || d.Variant != "on" || d.Reason != of.TargetingMatchReason {
		t.Fatalf("rule: %+v %v", d, err)
	}
	d, err = cl.BooleanValueDetails(ctx, "checkout", false, of.NewEvaluationContext("u1", nil))
	if err != nil || !d.Value || d.Reason != of.SplitReason {
		t.Fatalf("rollout: %+v %v", d, err)
	}
	checkout.Enabled = false
	set(checkout)
	d, err = cl.BooleanValueDetails(ctx, "checkout", true, of.NewEvaluationContext("u1", map[string]any{"country": "NO"}))
	if err != nil || d.Value || d.Reason != of.DisabledReason {
		t.Fatalf("kill switch: %+v %v", d, err)
	}
	if v, err := cl.IntValue(ctx, "limit", 0, of.EvaluationContext{}); err != nil || v != 42 {
		t.Fatalf("int: %v %v", v, err)
	}
	if v, err := cl.FloatValue(ctx, "limit", 0, of.EvaluationContext{}); err != nil || v != 42 {
		t.Fatalf("float: %v %v", v, err)
	}
	if v, err := cl.StringValue(ctx, "theme", "", of.EvaluationContext{}); err != nil || v != "dark" {
		t.Fatalf("string: %v %v", v, err)
	}
	if v, err := cl.ObjectValue(ctx, "cfg", nil, of.EvaluationContext{}); err != nil || v.(map[string]any)["x"] != "y" {
		t.Fatalf("object: %v %v", v, err)
	}
	sd, err := cl.StringValueDetails(ctx, "nope", "fallback", of.EvaluationContext{})
	if err == nil || sd.Value != "fallback" || sd.ErrorCode != of.FlagNotFoundCode {
		t.Fatalf("missing flag: %+v %v", sd, err)
	}
	sd, err = cl.StringValueDetails(ctx, "limit", "fallback", of.EvaluationContext{})
	if err == nil || sd.Value != "fallback" || sd.ErrorCode != of.TypeMismatchCode {
		t.Fatalf("type mismatch: %+v %v", sd, err)
	}
}
