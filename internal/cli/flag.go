package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/recipe"
	"github.com/spf13/cobra"
)

func (a *App) flagCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "flag",
		Short: "Set, read, roll out and evaluate feature flags",
		Long: `Feature flags are JSON documents under dkv.flags/KEY (docs/recipes.md,
"Feature flags"): typed variants, targeting rules, a sticky percentage
rollout and a kill switch (enabled: false serves the off variant).`,
	}
	cmd.AddCommand(a.flagSetCmd(), a.flagGetCmd(), a.flagListCmd(), a.flagRolloutCmd(), a.flagEvaluateCmd())
	return cmd
}

// flagExample is the flag document `dkv flag set --help` shows: every
// field of the schema. docs/recipes.md shows the same document, and a
// test holds the two to each other and to the validator.
const flagExample = `{
  "key": "checkout.new",
  "type": "bool",
  "variants": {"on": true, "off": false},
  "defaultVariant": "off",
  "offVariant": "off",
  "enabled": true,
  "rules": [
    {"attribute": "plan", "op": "eq", "values": ["beta"], "variant": "on"},
    {"attribute": "country", "op": "in", "values": ["NO", "SE"], "variant": "on"}
  ],
  "rollout": {"variant": "on", "percent": 5}
}`

func (a *App) flagSetCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "set KEY",
		Short: "Write flag KEY from the JSON document on stdin",
		Long: `dkv flag set KEY reads a flag document (JSON) from stdin, validates it and
writes it; it prints "set KEY revision=R". An invalid document is refused
with InvalidInput (exit 6) naming the field, its value and the limit:
flag "KEY": rules[1].op: "gt" is not eq, in or not_in.

A document with every field (dkv flag set checkout.new < checkout.json):

` + flagExample + `

  key             optional; if present it must be KEY
  type            bool, string, number or json: the type of every variant's
                  value. OpenFeature's boolean, integer (a number whose
                  variants are integers), float and object are accepted and
                  stored as bool, number, number and json.
  variants        1 to 64 names, each with its value
  defaultVariant  served when no rule matches and the targeting key is
                  outside the rollout
  offVariant      served to everyone while enabled is false (kill switch)
  enabled         false turns the flag off
  rules           optional, at most 64, the first that matches wins:
                  attribute, op (eq: equals the one value; in: is one of
                  the values; not_in: is absent or none of them), values
                  (strings, at most 1024), variant
  rollout         optional: variant served to percent (0 to 100, in steps
                  of 0.01) of targeting keys; a key inside stays inside as
                  the percentage grows (dkv flag rollout changes it)

See docs/recipes.md, "Feature flags".`,
		Args: Args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			b, err := io.ReadAll(io.LimitReader(a.stdin, recipe.MaxFlagDocument+1))
			if err != nil {
				return err
			}
			f, err := recipe.ParseFlag(argv[0], b)
			if err != nil {
				return err
			}
			return a.run(func(ctx context.Context, c *client.Client) error {
				rev, err := recipe.SetFlag(ctx, c, f)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(a.stdout, "set %s revision=%d\n", f.Key, rev)
				return err
			})
		},
	}
}

func (a *App) flagGetCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "get KEY",
		Short: "Print flag KEY's document (JSON)",
		Args:  Args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.run(func(ctx context.Context, c *client.Client) error {
				f, err := recipe.GetFlag(ctx, c, argv[0])
				if err != nil {
					return err
				}
				out, err := json.MarshalIndent(f, "", "  ")
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(a.stdout, "%s\n", out)
				return err
			})
		},
	}
}

// jsonFlagLine is one flag in `dkv flag list -o json`.
type jsonFlagLine struct {
	Key         string              `json:"key"`
	Type        recipe.FlagType     `json:"type,omitempty"`
	Enabled     bool                `json:"enabled"`
	Default     string              `json:"defaultVariant,omitempty"`
	Rollout     *recipe.FlagRollout `json:"rollout,omitempty"`
	ModRevision int64               `json:"modRevision,omitempty"`
	Error       string              `json:"error,omitempty"`
}

func (a *App) flagListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List flags, one \"KEY TYPE on|off default=V [rollout=V:P%]\" line each",
		Long: `dkv flag list prints one line per flag, in key order:
"KEY TYPE on|off default=VARIANT" and, with a rollout, " rollout=VARIANT:P%".
A document under dkv.flags/ that is not a valid flag is listed as
"KEY invalid: PROBLEM". -o json prints one object per line.`,
		Args: Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.run(func(ctx context.Context, c *client.Client) error {
				flags, bad, err := recipe.ListFlags(ctx, c)
				if err != nil {
					return err
				}
				lines := make([]jsonFlagLine, 0, len(flags)+len(bad))
				for _, f := range flags {
					lines = append(lines, jsonFlagLine{Key: f.Key, Type: f.Type, Enabled: f.Enabled, Default: f.DefaultVariant, Rollout: f.Rollout, ModRevision: f.ModRevision})
				}
				for k, e := range bad {
					key := strings.TrimPrefix(k, recipe.FlagPrefix)
					msg := e.Error()
					var ce *client.Error
					if errors.As(e, &ce) {
						msg = ce.Msg
					}
					// The line names the flag already.
					msg = strings.TrimPrefix(msg, fmt.Sprintf("flag %q: ", key))
					lines = append(lines, jsonFlagLine{Key: key, Error: msg})
				}
				sort.Slice(lines, func(i, j int) bool { return lines[i].Key < lines[j].Key })
				for _, l := range lines {
					if a.JSON() {
						if err := WriteJSON(a.stdout, l); err != nil {
							return err
						}
						continue
					}
					var s string
					switch {
					case l.Error != "":
						s = fmt.Sprintf("%s invalid: %s", l.Key, l.Error)
					default:
						state := "off"
						if l.Enabled {
							state = "on"
						}
						s = fmt.Sprintf("%s %s %s default=%s", l.Key, l.Type, state, l.Default)
						if l.Rollout != nil {
							s += fmt.Sprintf(" rollout=%s:%s%%", l.Rollout.Variant, strconv.FormatFloat(l.Rollout.Percent, 'f', -1, 64))
						}
					}
					if _, err := fmt.Fprintln(a.stdout, s); err != nil {
						return err
					}
				}
				return nil
			})
		},
	}
}

func (a *App) flagRolloutCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rollout KEY PERCENT",
		Short: "Set the percentage of flag KEY's rollout (compare-and-set)",
		Long: `dkv flag rollout KEY PERCENT sets the rollout of flag KEY (which must have
one) to PERCENT (0 to 100, 0.01 resolution) by a compare-and-set on the
flag's revision, and prints "rollout KEY P% revision=R". Bucketing is
sticky: raising PERCENT keeps every user who already had the variant.`,
		Args: Args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			p, err := strconv.ParseFloat(strings.TrimSuffix(argv[1], "%"), 64)
			if err != nil {
				return Usagef("PERCENT %q is not a number", argv[1])
			}
			return a.run(func(ctx context.Context, c *client.Client) error {
				rev, err := recipe.SetRollout(ctx, c, argv[0], p)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(a.stdout, "rollout %s %s%% revision=%d\n", argv[0], strconv.FormatFloat(p, 'f', -1, 64), rev)
				return err
			})
		},
	}
}

// jsonFlagEval is `dkv flag evaluate -o json`.
type jsonFlagEval struct {
	Key     string          `json:"key"`
	Variant string          `json:"variant"`
	Value   json.RawMessage `json:"value"`
	Reason  recipe.Reason   `json:"reason"`
}

func (a *App) flagEvaluateCmd() *cobra.Command {
	var attrFlags []string
	cmd := &cobra.Command{
		Use:   "evaluate KEY [TARGETING_KEY]",
		Short: "Evaluate flag KEY for a targeting key and attributes",
		Long: `dkv flag evaluate KEY [TARGETING_KEY] [--attr NAME=VALUE ...] evaluates
flag KEY as an application would (the local evaluator, from a snapshot of
the flags) and prints "VARIANT VALUE REASON", REASON being DISABLED,
TARGETING_MATCH, SPLIT or DEFAULT.`,
		Args: Args(cobra.RangeArgs(1, 2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			attrs := map[string]string{}
			for _, s := range attrFlags {
				k, v, ok := strings.Cut(s, "=")
				if !ok || k == "" {
					return Usagef("--attr %q is not NAME=VALUE", s)
				}
				attrs[k] = v
			}
			tk := ""
			if len(argv) == 2 {
				tk = argv[1]
			}
			return a.run(func(ctx context.Context, c *client.Client) error {
				fl, err := recipe.NewFlags(ctx, c)
				if err != nil {
					return err
				}
				defer fl.Close()
				d, err := fl.Detail(argv[0], tk, attrs, "")
				if err != nil {
					if errors.Is(err, client.ErrNotFound) {
						return &client.Error{Kind: client.ErrNotFound, Msg: "flag " + argv[0] + " not found"}
					}
					return err
				}
				if a.JSON() {
					return WriteJSON(a.stdout, jsonFlagEval{Key: argv[0], Variant: d.Variant, Value: d.Raw, Reason: d.Reason})
				}
				var val bytes.Buffer
				if err := json.Compact(&val, d.Raw); err != nil {
					return err
				}
				_, err = fmt.Fprintf(a.stdout, "%s %s %s\n", d.Variant, val.String(), d.Reason)
				return err
			})
		},
	}
	cmd.Flags().StringArrayVar(&attrFlags, "attr", nil, "an attribute NAME=VALUE for the targeting rules (repeatable)")
	return cmd
}
