package servercmd

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/dkv-io/dkv/internal/cli"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// Every serve flag can also come from a DKV_ environment variable and
// from a YAML file (--config-file), as etcd's flags come from ETCD_
// variables and --config-file. A flag on the command line wins over the
// environment, which wins over the file, which wins over the default.

const (
	configFileFlag  = "config-file"
	printConfigFlag = "print-config"
	envPrefix       = "DKV_"
)

// secretFlags are never printed by --print-config.
var secretFlags = map[string]bool{"initial-cluster-token": true}

// clientEnv are the DKV_ variables of the client commands: set in a
// shell that also runs serve, they are not typos of serve settings.
var clientEnv = map[string]bool{
	"DKV_ENDPOINTS": true, "DKV_STORE": true, "DKV_CACERT": true, "DKV_CERT": true,
	"DKV_KEY": true, "DKV_USER": true, "DKV_PASSWORD": true,
}

// envName is the environment variable of a serve flag: DKV_DATA_DIR for
// --data-dir.
func envName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// configurable says whether a flag may come from the environment or the
// file: every serve flag except the two about configuration itself.
func configurable(f *pflag.Flag) bool {
	return f.Name != configFileFlag && f.Name != printConfigFlag && f.Name != "help"
}

// source says where a flag's effective value came from.
type source string

const (
	fromDefault source = "default"
	fromFlag    source = "flag"
	fromFile    source = "config file"
)

// applyConfig fills every flag not given on the command line from its
// DKV_ variable or, failing that, from the config file, and returns where
// each value came from. Unknown keys in the file are refused; unknown
// DKV_ variables are warned about on warn (they are most likely typos).
func applyConfig(fs *pflag.FlagSet, environ []string, warn io.Writer) (map[string]source, error) {
	from := make(map[string]source)
	fs.VisitAll(func(f *pflag.Flag) {
		from[f.Name] = fromDefault
		if f.Changed {
			from[f.Name] = fromFlag
		}
	})
	env := make(map[string]string)
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if ok && strings.HasPrefix(k, envPrefix) {
			env[k] = v
		}
	}
	// The config file itself may be named by DKV_CONFIG_FILE.
	if cf := fs.Lookup(configFileFlag); cf != nil && !cf.Changed {
		if v, ok := env[envName(configFileFlag)]; ok {
			if err := fs.Set(configFileFlag, v); err != nil {
				return nil, err
			}
		}
	}
	known := map[string]bool{envName(configFileFlag): true}
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || !configurable(f) {
			return
		}
		name := envName(f.Name)
		known[name] = true
		v, ok := env[name]
		if !ok || from[f.Name] == fromFlag {
			return
		}
		if e := fs.Set(f.Name, v); e != nil {
			err = cli.Usagef("%s: %v", name, e)
			return
		}
		from[f.Name] = source(name)
	})
	if err != nil {
		return nil, err
	}
	var unknown []string
	for k := range env {
		if !known[k] && !clientEnv[k] {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	for _, k := range unknown {
		hint := ""
		if f := flagForEnv(fs, k); f != "" {
			hint = fmt.Sprintf(" (did you mean %s?)", envName(f))
		}
		fmt.Fprintf(warn, "dkv serve: ignoring %s: no serve flag is named by it%s\n", k, hint)
	}
	path := fs.Lookup(configFileFlag)
	if path == nil || path.Value.String() == "" {
		return from, nil
	}
	file, err := readConfigFile(path.Value.String(), fs)
	if err != nil {
		return nil, err
	}
	for name, v := range file {
		if from[name] != fromDefault {
			continue
		}
		if err := fs.Set(name, v); err != nil {
			return nil, cli.Usagef("--config-file %s: %v", path.Value.String(), err)
		}
		from[name] = fromFile
	}
	return from, nil
}

// flagForEnv guesses the flag an unknown DKV_ variable was meant for:
// the one whose name matches once dashes and underscores are ignored.
func flagForEnv(fs *pflag.FlagSet, env string) string {
	squash := func(s string) string {
		return strings.NewReplacer("-", "", "_", "").Replace(strings.ToLower(s))
	}
	want := squash(strings.TrimPrefix(env, envPrefix))
	var found string
	fs.VisitAll(func(f *pflag.Flag) {
		if configurable(f) && squash(f.Name) == want {
			found = f.Name
		}
	})
	return found
}

// readConfigFile reads a YAML mapping of flag names to values, each value
// in the form the flag takes on the command line (a list for a
// comma-separated flag is also accepted).
func readConfigFile(path string, fs *pflag.FlagSet) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, cli.Usagef("--config-file: %v", err)
	}
	var doc map[string]yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, cli.Usagef("--config-file %s: not a YAML mapping of flag names to values: %v", path, err)
	}
	out := make(map[string]string, len(doc))
	for key, node := range doc {
		f := fs.Lookup(key)
		if f == nil || !configurable(f) {
			hint := ""
			if g := fs.Lookup(strings.ReplaceAll(key, "_", "-")); g != nil && configurable(g) {
				hint = fmt.Sprintf(" (did you mean %s?)", g.Name)
			}
			return nil, cli.Usagef("--config-file %s: line %d: unknown key %q%s; the keys are the names of dkv serve's flags", path, node.Line, key, hint)
		}
		v, err := nodeValue(&node)
		if err != nil {
			return nil, cli.Usagef("--config-file %s: line %d: %s: %v", path, node.Line, key, err)
		}
		out[key] = v
	}
	return out, nil
}

// nodeValue is a YAML value as a command-line value: a scalar as it is, a
// list of scalars joined with commas.
func nodeValue(n *yaml.Node) (string, error) {
	switch n.Kind {
	case yaml.ScalarNode:
		return n.Value, nil
	case yaml.SequenceNode:
		parts := make([]string, 0, len(n.Content))
		for _, c := range n.Content {
			if c.Kind != yaml.ScalarNode {
				return "", errors.New("a list may hold only plain values")
			}
			if strings.Contains(c.Value, ",") {
				return "", fmt.Errorf("list item %q has a comma", c.Value)
			}
			parts = append(parts, c.Value)
		}
		return strings.Join(parts, ","), nil
	}
	return "", errors.New("want a value or a list of values, not a mapping")
}

// printConfig writes the effective configuration as a YAML file that
// --config-file accepts, each line saying where its value came from.
// Secrets are left out.
func printConfig(w io.Writer, fs *pflag.FlagSet, from map[string]source) error {
	doc := &yaml.Node{Kind: yaml.MappingNode}
	var hidden []string
	var names []string
	fs.VisitAll(func(f *pflag.Flag) {
		if configurable(f) {
			names = append(names, f.Name)
		}
	})
	sort.Strings(names)
	for _, name := range names {
		f := fs.Lookup(name)
		if secretFlags[name] {
			if f.Value.String() != "" {
				hidden = append(hidden, fmt.Sprintf("# %s is set (from %s); not shown", name, from[name]))
			}
			continue
		}
		k := &yaml.Node{Kind: yaml.ScalarNode, Value: name}
		v := &yaml.Node{}
		if err := v.Encode(flagValue(f)); err != nil {
			return err
		}
		if v.Kind == yaml.SequenceNode {
			v.Style = yaml.FlowStyle // [a, b]: one line, with its comment
		}
		if from[name] != fromDefault {
			v.LineComment = "from " + string(from[name])
		}
		doc.Content = append(doc.Content, k, v)
	}
	var buf bytes.Buffer
	buf.WriteString("# dkv serve: the effective configuration (command line > DKV_ environment > --config-file > default)\n")
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	for _, h := range hidden {
		buf.WriteString(h + "\n")
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// flagValue is a flag's value as the YAML type that reads back to it.
func flagValue(f *pflag.Flag) any {
	s := f.Value.String()
	switch f.Value.Type() {
	case "bool":
		if b, err := strconv.ParseBool(s); err == nil {
			return b
		}
	case "int", "int64":
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return n
		}
	case "float64":
		if x, err := strconv.ParseFloat(s, 64); err == nil {
			return x
		}
	case "stringSlice":
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			if l := sv.GetSlice(); len(l) > 0 {
				return l
			}
			return []string{}
		}
	}
	return s
}

// serverOnly keeps a server command's help to its own flags: the client
// flags every other command inherits (--endpoints, --cacert, ...) mean
// nothing to it, and giving one is refused rather than ignored.
func serverOnly(cmd *cobra.Command) {
	cmd.SetUsageTemplate(strings.Replace(cmd.UsageTemplate(),
		`{{if .HasAvailableInheritedFlags}}`, `{{if false}}`, 1))
	prev := cmd.PreRunE
	cmd.PreRunE = func(c *cobra.Command, args []string) error {
		var given []string
		c.InheritedFlags().VisitAll(func(f *pflag.Flag) {
			if f.Changed {
				given = append(given, "--"+f.Name)
			}
		})
		if len(given) > 0 {
			return cli.Usagef("%s: %s is a flag of the client commands; dkv %s does not take it (see dkv %s --help)",
				c.Name(), strings.Join(given, ", "), c.Name(), c.Name())
		}
		if prev != nil {
			return prev(c, args)
		}
		return nil
	}
}

// byteSize is a flag holding a number of bytes, given as a plain number
// or with a unit: 512MiB, 8GiB, 100MB (KB, MB, GB and TB are powers of
// 1000; KiB, MiB, GiB and TiB of 1024; B or no unit is bytes).
type byteSize[T int | int64] struct{ p *T }

func newByteSize[T int | int64](p *T, def T) *byteSize[T] {
	*p = def
	return &byteSize[T]{p}
}

func (b *byteSize[T]) Type() string { return "bytes" }

func (b *byteSize[T]) String() string { return formatBytes(int64(*b.p)) }

func (b *byteSize[T]) Set(s string) error {
	n, err := parseBytes(s)
	if err != nil {
		return err
	}
	if int64(T(n)) != n {
		return fmt.Errorf("%s is too large", s)
	}
	*b.p = T(n)
	return nil
}

var byteUnits = []struct {
	name string
	mult int64
}{
	{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
	{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3},
	{"B", 1},
}

// parseBytes reads "8GiB", "1.5GB", "4096" or "-1" (some flags give a
// negative number a meaning, such as off).
func parseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range byteUnits {
		if len(t) > len(u.name) && strings.EqualFold(t[len(t)-len(u.name):], u.name) {
			t, mult = strings.TrimSpace(t[:len(t)-len(u.name)]), u.mult
			break
		}
	}
	if n, err := strconv.ParseInt(t, 10, 64); err == nil {
		if n > math.MaxInt64/mult || n < math.MinInt64/mult {
			return 0, fmt.Errorf("%q is too large", s)
		}
		return n * mult, nil
	}
	x, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
		return 0, fmt.Errorf("%q is not a size: give bytes, or a number with a unit such as 512MiB, 8GiB or 100MB", s)
	}
	v := math.Round(x * float64(mult))
	if v >= math.MaxInt64 || v <= math.MinInt64 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return int64(v), nil
}

// formatBytes writes n with the largest binary unit that divides it.
func formatBytes(n int64) string {
	for _, u := range byteUnits[:4] {
		if n != 0 && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10)
}
