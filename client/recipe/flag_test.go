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

func boolFlag(key string) *recipe.Flag {
	return &recipe.Flag{
		Key: key, Type: recipe.FlagBool, Enabled: true,
		Variants:       map[string]json.RawMessage{"on": json.RawMessage("true"), "off": json.RawMessage("false")},
		DefaultVariant: "off", OffVariant: "off",
	}
}

func newFlags(t *testing.T, c *client.Client) *recipe.Flags {
	t.Helper()
	fl, err := recipe.NewFlags(testCtx(t), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fl.Close)
	return fl
}

func setFlag(t *testing.T, c *client.Client, fl *recipe.Flags, f *recipe.Flag) {
	t.Helper()
	rev, err := recipe.SetFlag(context.Background(), c, f)
	if err != nil {
		t.Fatal(err)
	}
	if err := fl.WaitForRevision(context.Background(), rev); err != nil {
		t.Fatal(err)
	}
}

// TestFlagRolloutIsSticky: rolling from 5% to 25% keeps every targeting
// key that had the new variant at 5%, over 100,000 keys; the shares are
// close to the percentages.
func TestFlagRolloutIsSticky(t *testing.T) {
	c := openStore(t)
	fl := newFlags(t, c)
	f := boolFlag("checkout.new")
	f.Rollout = &recipe.FlagRollout{Variant: "on", Percent: 5}
	setFlag(t, c, fl, f)
	const n = 100000
	at5 := make([]bool, n)
	count5 := 0
	for i := range n {
		at5[i] = fl.Bool("checkout.new", fmt.Sprintf("user-%d", i), nil, false)
		if at5[i] {
			count5++
		}
	}
	rev, err := recipe.SetRollout(context.Background(), c, "checkout.new", 25)
	if err != nil {
		t.Fatal(err)
	}
	if err := fl.WaitForRevision(context.Background(), rev); err != nil {
		t.Fatal(err)
	}
	count25 := 0
	for i := range n {
		v, reason, err := fl.Evaluate("checkout.new", fmt.Sprintf("user-%d", i), nil)
		if err != nil {
			t.Fatal(err)
		}
		if at5[i] && v != "on" {
			t.Fatalf("user-%d had on at 5%% and %s (%s) at 25%%", i, v, reason)
		}
		if v == "on" {
			count25++
			if reason != recipe.ReasonSplit {
				t.Fatalf("user-%d: reason %s, want SPLIT", i, reason)
			}
		}
	}
	if count5 < 4500 || count5 > 5500 || count25 < 24000 || count25 > 26000 {
		t.Fatalf("on at 5%%: %d of %d, at 25%%: %d", count5, n, count25)
	}
	// An empty targeting key is never in a rollout.
	if v, r, _ := fl.Evaluate("checkout.new", "", nil); v != "off" || r != recipe.ReasonDefault {
		t.Fatalf("empty targeting key: %s %s", v, r)
	}
}

// TestFlagRulesAndKillSwitch: rules match in order (eq, in, not_in),
// before the rollout; disabling serves the off variant to everyone.
func TestFlagRulesAndKillSwitch(t *testing.T) {
	c := openStore(t)
	fl := newFlags(t, c)
	f := &recipe.Flag{
		Key: "theme", Type: recipe.FlagString, Enabled: true,
		Variants: map[string]json.RawMessage{"light": json.RawMessage(`"light"`), "dark": json.RawMessage(`"dark"`),
			"beta": json.RawMessage(`"beta"`), "none": json.RawMessage(`"none"`)},
		DefaultVariant: "light", OffVariant: "none",
		Rules: []recipe.FlagRule{
			{Attribute: "email", Op: recipe.OpEquals, Values: []string{"ceo@example.com"}, Variant: "beta"},
			{Attribute: "country", Op: recipe.OpIn, Values: []string{"NO", "SE"}, Variant: "dark"},
			{Attribute: "plan", Op: recipe.OpNotIn, Values: []string{"free", "pro"}, Variant: "beta"},
		},
		Rollout: &recipe.FlagRollout{Variant: "dark", Percent: 100},
	}
	f.Rollout.Percent = 0
	setFlag(t, c, fl, f)
	cases := []struct {
		attrs  map[string]string
		want   string
		reason recipe.Reason
	}{
		{map[string]string{"email": "ceo@example.com", "country": "NO", "plan": "free"}, "beta", recipe.ReasonTargetingMatch},
		{map[string]string{"country": "SE", "plan": "free"}, "dark", recipe.ReasonTargetingMatch},
		{map[string]string{"country": "FR", "plan": "pro"}, "light", recipe.ReasonDefault},
		{map[string]string{"country": "FR", "plan": "enterprise"}, "beta", recipe.ReasonTargetingMatch},
		{map[string]string{"country": "FR"}, "beta", recipe.ReasonTargetingMatch}, // plan absent: not in
	}
	for _, tc := range cases {
		d, err := fl.Detail("theme", "u1", tc.attrs, recipe.FlagString)
		if err != nil {
			t.Fatal(err)
		}
		if d.Variant != tc.want || d.String != tc.want || d.Reason != tc.reason {
			t.Fatalf("%v: got %s=%q (%s), want %s (%s)", tc.attrs, d.Variant, d.String, d.Reason, tc.want, tc.reason)
		}
	}
	f.Enabled = false
	setFlag(t, c, fl, f)
	for _, tc := range cases {
		if v, r, _ := fl.Evaluate("theme", "u1", tc.attrs); v != "none" || r != recipe.ReasonDisabled {
			t.Fatalf("disabled, %v: %s (%s), want none (DISABLED)", tc.attrs, v, r)
		}
	}
	if got := fl.String("theme", "u1", nil, "x"); got != "none" {
		t.Fatalf("String on a disabled flag: %q", got)
	}
	// Type mismatch and a missing flag serve the caller's default.
	if fl.Bool("theme", "u1", nil, true) != true || fl.Number("nope", "u1", nil, 7) != 7 {
		t.Fatal("a mismatched or missing flag did not serve the default")
	}
	if _, _, err := fl.Evaluate("nope", "u1", nil); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("missing flag: %v", err)
	}
}

// TestFlagTypedValues: number and JSON flags evaluate to their values.
func TestFlagTypedValues(t *testing.T) {
	c := openStore(t)
	fl := newFlags(t, c)
	setFlag(t, c, fl, &recipe.Flag{Key: "limit", Type: recipe.FlagNumber, Enabled: true,
		Variants: map[string]json.RawMessage{"low": json.RawMessage("10"), "high": json.RawMessage("99.5")}, DefaultVariant: "high", OffVariant: "low"})
	setFlag(t, c, fl, &recipe.Flag{Key: "cfg", Type: recipe.FlagJSON, Enabled: true,
		Variants: map[string]json.RawMessage{"a": json.RawMessage(`{"n":1}`)}, DefaultVariant: "a", OffVariant: "a"})
	if got := fl.Number("limit", "u", nil, 0); got != 99.5 {
		t.Fatalf("Number: %v", got)
	}
	if got, ok := fl.JSON("cfg", "u", nil, nil).(map[string]any); !ok || got["n"] != float64(1) {
		t.Fatalf("JSON: %#v", fl.JSON("cfg", "u", nil, nil))
	}
	if got := fl.Keys(); strings.Join(got, ",") != "cfg,limit" {
		t.Fatalf("Keys: %v", got)
	}
}

// TestFlagChangeSeenAfterWait: a second evaluator (another instance) sees
// a write once it reached the write's revision; a delete removes the flag.
func TestFlagChangeSeenAfterWait(t *testing.T) {
	c := openStore(t)
	a, b := newFlags(t, c), newFlags(t, c)
	f := boolFlag("x")
	setFlag(t, c, a, f)
	f.DefaultVariant = "on"
	rev, err := recipe.SetFlag(context.Background(), c, f)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.WaitForRevision(context.Background(), rev); err != nil {
		t.Fatal(err)
	}
	if !b.Bool("x", "u", nil, false) {
		t.Fatal("instance b does not see the change after WaitForRevision")
	}
	if b.Revision() < rev {
		t.Fatalf("Revision %d < %d", b.Revision(), rev)
	}
	del := mustDelete(t, c, recipe.FlagPrefix+"x")
	if err := b.WaitForRevision(context.Background(), del); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Evaluate("x", "u", nil); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
}

// TestFlagBadDocumentsRefused: SetFlag refuses invalid flags with
// InvalidInput naming the problem; a bad document written around
// SetFlag makes evaluations of that flag fail (default served), others work.
func TestFlagBadDocumentsRefused(t *testing.T) {
	c := openStore(t)
	fl := newFlags(t, c)
	mod := func(f func(*recipe.Flag)) *recipe.Flag { x := boolFlag("k"); f(x); return x }
	bad := []struct {
		f    *recipe.Flag
		want string
	}{
		{mod(func(f *recipe.Flag) { f.Key = "a/b" }), `key: '/' is not allowed`},
		{mod(func(f *recipe.Flag) { f.Key = "" }), `key: empty; a key is 1 to 128 bytes`},
		{mod(func(f *recipe.Flag) { f.Type = "int" }), `type: "int" is not bool, string, number or json`},
		{mod(func(f *recipe.Flag) { f.Variants["on"] = json.RawMessage(`"yes"`) }), `variants["on"]: "yes" is not a bool`},
		{mod(func(f *recipe.Flag) { f.DefaultVariant = "maybe" }), `defaultVariant: "maybe" is not one of the variants (off, on)`},
		{mod(func(f *recipe.Flag) { f.OffVariant = "" }), `offVariant: missing`},
		{mod(func(f *recipe.Flag) {
			f.Rules = []recipe.FlagRule{{Attribute: "a", Op: "gt", Values: []string{"1"}, Variant: "on"}}
		}), `rules[0].op: "gt" is not eq, in or not_in`},
		{mod(func(f *recipe.Flag) {
			f.Rules = []recipe.FlagRule{{Attribute: "a", Op: "eq", Values: []string{"1", "2"}, Variant: "on"}}
		}), "rules[0].values: 2 given; eq takes exactly 1"},
		{mod(func(f *recipe.Flag) { f.Rollout = &recipe.FlagRollout{Variant: "on", Percent: 101} }), "rollout.percent: 101 is not in 0..100"},
	}
	for _, tc := range bad {
		_, err := recipe.SetFlag(context.Background(), c, tc.f)
		if !errors.Is(err, client.ErrInvalidInput) || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("SetFlag(%+v): %v, want InvalidInput containing %q", tc.f, err, tc.want)
		}
	}
	if _, err := recipe.SetRollout(context.Background(), c, "k", 10); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("SetRollout of a missing flag: %v", err)
	}
	setFlag(t, c, fl, boolFlag("k"))
	if _, err := recipe.SetRollout(context.Background(), c, "k", 10); !errors.Is(err, client.ErrInvalidInput) {
		t.Fatalf("SetRollout without a rollout: %v", err)
	}
	rev := mustPut(t, c, recipe.FlagPrefix+"broken", `{"key":"broken","type":"bool"}`)
	if err := fl.WaitForRevision(context.Background(), rev); err != nil {
		t.Fatal(err)
	}
	if _, _, err := fl.Evaluate("broken", "u", nil); !errors.Is(err, client.ErrInvalidInput) {
		t.Fatalf("a bad document evaluated: %v", err)
	}
	if fl.Bool("broken", "u", nil, true) != true || fl.Bool("k", "u", nil, true) != false {
		t.Fatal("a bad document broke evaluation")
	}
	_, badList, err := recipe.ListFlags(context.Background(), c)
	if err != nil || badList[recipe.FlagPrefix+"broken"] == nil {
		t.Fatalf("ListFlags did not report the bad document: %v %v", badList, err)
	}
}

// racingKV runs race once, after SetRollout's read and before its write.
type racingKV struct {
	*client.Client
	race func()
}

func (r *racingKV) Get(ctx context.Context, key string, opts ...client.OpOption) (*client.KeyValue, error) {
	kv, err := r.Client.Get(ctx, key, opts...)
	if f := r.race; f != nil {
		r.race = nil
		f()
	}
	return kv, err
}

// TestFlagSetRolloutKeepsConcurrentEdit: an edit made between
// SetRollout's read and its write is kept (the compare-and-set fails and
// SetRollout retries on the new document).
func TestFlagSetRolloutKeepsConcurrentEdit(t *testing.T) {
	c := openStore(t)
	fl := newFlags(t, c)
	f := boolFlag("k")
	f.Rollout = &recipe.FlagRollout{Variant: "on", Percent: 5}
	setFlag(t, c, fl, f)
	kv := &racingKV{Client: c, race: func() {
		g := boolFlag("k")
		g.Rollout = &recipe.FlagRollout{Variant: "on", Percent: 5}
		g.Enabled = false
		if _, err := recipe.SetFlag(context.Background(), c, g); err != nil {
			t.Error(err)
		}
	}}
	if _, err := recipe.SetRollout(context.Background(), kv, "k", 50); err != nil {
		t.Fatal(err)
	}
	got, err := recipe.GetFlag(context.Background(), c, "k")
	if err != nil {
		t.Fatal(err)
	}
	if got.Enabled || got.Rollout.Percent != 50 {
		t.Fatalf("after a racing edit: enabled=%v percent=%v, want false 50", got.Enabled, got.Rollout.Percent)
	}
}

// TestFlagBucketIsStable pins FlagBucket to FNV-1a 64 of key, 0, targeting
// key, mod 10,000 (values computed independently): a change to the hash
// would move users between variants across a release.
func TestFlagBucketIsStable(t *testing.T) {
	for _, tc := range []struct {
		key, tk string
		want    uint32
	}{{"checkout.new", "user-42", 561}, {"a", "", 8084}, {"", "a", 2426}} {
		if got := recipe.FlagBucket(tc.key, tc.tk); got != tc.want {
			t.Fatalf("FlagBucket(%q, %q) = %d, want %d", tc.key, tc.tk, got, tc.want)
		}
	}
}
