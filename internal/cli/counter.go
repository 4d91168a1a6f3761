package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/dkv-io/dkv/client"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func (a *App) counterCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "counter",
		Short: "Atomic integer counters",
		Args:  Args(cobra.NoArgs),
		RunE:  func(cmd *cobra.Command, _ []string) error { return Usagef("counter needs a subcommand: add") },
	}
	var min, max int64
	add := &cobra.Command{
		Use:   "add KEY DELTA",
		Short: "Add DELTA (may be negative) to the counter at KEY and print the result",
		Long: `Atomically add DELTA to the decimal integer stored at KEY (a missing key
counts as 0) and print the new value. With --min / --max, an add that would
leave the bounds changes nothing and exits with 4 (Conflict).`,
		// pflag reads "-2" as a shorthand flag; parse flags ourselves so a
		// negative DELTA works without "--".
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, raw []string) error {
			argv, err := parseWithNegativeArgs(cmd, raw)
			if err != nil || argv == nil {
				return err
			}
			if err := Args(cobra.ExactArgs(2))(cmd, argv); err != nil {
				return err
			}
			if err := cmd.Root().PersistentPreRunE(cmd, argv); err != nil {
				return err
			}
			delta, err := strconv.ParseInt(argv[1], 10, 64)
			if err != nil {
				return Usagef("DELTA %q is not an integer", argv[1])
			}
			var opts []client.OpOption
			if cmd.Flags().Changed("min") {
				opts = append(opts, client.WithMin(min))
			}
			if cmd.Flags().Changed("max") {
				opts = append(opts, client.WithMax(max))
			}
			return a.run(func(ctx context.Context, c *client.Client) error {
				v, err := c.Counter(ctx, argv[0], delta, opts...)
				if err != nil {
					return err
				}
				if a.JSON() {
					return WriteJSON(a.stdout, map[string]int64{"value": v})
				}
				fmt.Fprintln(a.stdout, v)
				return nil
			})
		},
	}
	add.Flags().Int64Var(&min, "min", 0, "fail rather than go below N")
	add.Flags().Int64Var(&max, "max", 0, "fail rather than go above N")
	cmd.AddCommand(add)
	return cmd
}

// parseWithNegativeArgs parses cmd's flags from raw, treating negative
// numbers that are not flag values as positional arguments. It returns
// nil, nil after printing help for --help.
func parseWithNegativeArgs(cmd *cobra.Command, raw []string) ([]string, error) {
	var flagArgs, pos []string
	fs := cmd.Flags()
	fs.AddFlagSet(cmd.InheritedFlags())
	for i := 0; i < len(raw); i++ {
		a := raw[i]
		switch {
		case a == "--":
			pos = append(pos, raw[i+1:]...)
			i = len(raw)
		case isNegativeNumber(a) || !strings.HasPrefix(a, "-") || a == "-":
			pos = append(pos, a)
		default:
			flagArgs = append(flagArgs, a)
			name := strings.TrimLeft(a, "-")
			if strings.Contains(name, "=") {
				continue
			}
			var f *pflag.Flag
			if strings.HasPrefix(a, "--") {
				f = fs.Lookup(name)
			} else if len(name) == 1 {
				f = fs.ShorthandLookup(name)
			}
			if f != nil && f.NoOptDefVal == "" && i+1 < len(raw) {
				i++
				flagArgs = append(flagArgs, raw[i])
			}
		}
	}
	if err := fs.Parse(flagArgs); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil, cmd.Help()
		}
		return nil, usageError{err}
	}
	if h, _ := fs.GetBool("help"); h {
		return nil, cmd.Help()
	}
	return pos, nil
}

func isNegativeNumber(s string) bool {
	_, err := strconv.ParseInt(s, 10, 64)
	return err == nil && strings.HasPrefix(s, "-")
}
