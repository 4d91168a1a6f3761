package servercmd

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/dkv-io/dkv/internal/cli"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// configSamples gives every serve flag a value other than its default;
// together they are one configuration that passes validation. A flag
// added to serve without a sample here fails TestServeConfigEveryFlag,
// which is the point: every flag must be settable from the file and the
// environment, and shown by --print-config.
func configSamples(dir string) (batch map[string]string, alone map[string]string) {
	secret := filepath.Join(dir, "peer-secret")
	if err := os.WriteFile(secret, []byte(strings.Repeat("ab", 32)+"\n"), 0o600); err != nil {
		panic(err)
	}
	batch = map[string]string{
		"log-format":               "json",
		"data-dir":                 filepath.Join(dir, "data"),
		"client-addr":              "127.0.0.1:17861",
		"http-addr":                "127.0.0.1:17863",
		"peer-addr":                "127.0.0.1:17862",
		"name":                     "n1",
		"initial-cluster":          "n1=127.0.0.1:17862,n2=127.0.0.1:17872",
		"initial-cluster-state":    "existing",
		"initial-cluster-token":    "s3cret-token",
		"insecure-peer":            "true",
		"join":                     "127.0.0.1:17871,127.0.0.1:17881",
		"advertise-client-addr":    "10.0.0.1:7861",
		"advertise-peer-addr":      "127.0.0.1:17862",
		"request-timeout":          "7s",
		"max-value-bytes":          "2MiB",
		"max-txn-ops":              "64",
		"auto-compact-revisions":   "1000",
		"auto-compact-period":      "1h0m0s",
		"lease-max-clock-drift":    "0.25",
		"lease-renew-window":       "500ms",
		"max-connections":          "100",
		"http-allowed-hosts":       "dkv.example.com,dkv2.example.com",
		"cors-allowed-origins":     "https://app.example",
		"metrics-open":             "true",
		"pprof":                    "true",
		"auth-token-ttl":           "10m0s",
		"auth-bcrypt-cost":         "5",
		"quota-bytes":              "32MiB",
		"space-reserve-bytes":      "64MiB",
		"cert-file":                filepath.Join(dir, "c.pem"),
		"key-file":                 filepath.Join(dir, "c.key"),
		"trusted-ca-file":          filepath.Join(dir, "ca.pem"),
		"client-cert-auth":         "true",
		"peer-cert-file":           filepath.Join(dir, "p.pem"),
		"peer-key-file":            filepath.Join(dir, "p.key"),
		"peer-trusted-ca-file":     filepath.Join(dir, "pca.pem"),
		"peer-cert-allowed-cn":     "n1.example,n2.example",
		"tls-min-version":          "1.3",
		"corrupt-check-interval":   "2m0s",
		"backup-dir":               filepath.Join(dir, "backups"),
		"backup-interval":          "30m0s",
		"backup-keep":              "3",
		"cache-bytes":              "16MiB",
		"ballast-bytes":            "32MiB",
		"snapshot-count":           "300",
		"snapshot-catchup-entries": "150",
		"raft-log-segment-bytes":   "1MiB",
	}
	// --peer-secret-file and --initial-cluster-token may not be given
	// together.
	alone = map[string]string{"peer-secret-file": secret}
	return batch, alone
}

// canonical is a value as the flag itself prints it after reading it, so
// that 2MiB and 2097152, or a,b and [a b], compare equal.
func canonical(t *testing.T, name, v string) string {
	t.Helper()
	f := serveCmd(&cli.App{}).Flags().Lookup(name)
	if err := f.Value.Set(v); err != nil {
		t.Fatalf("--%s %q: %v", name, v, err)
	}
	return f.Value.String()
}

// printed runs serve --print-config with args and returns each key's
// value as a command-line value and its line comment.
func printed(t *testing.T, args ...string) (vals, comments map[string]string, out string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := Server.Run(append([]string{"serve", "--print-config"}, args...), nil, &stdout, &stderr); code != 0 {
		t.Fatalf("serve --print-config %q: exit %d, stderr %s", args, code, stderr.String())
	}
	var doc map[string]yaml.Node
	if err := yaml.Unmarshal(stdout.Bytes(), &doc); err != nil {
		t.Fatalf("--print-config output is not YAML: %v\n%s", err, stdout.String())
	}
	vals, comments = map[string]string{}, map[string]string{}
	for k, n := range doc {
		v, err := nodeValue(&n)
		if err != nil {
			t.Fatalf("--print-config: %s: %v", k, err)
		}
		vals[k], comments[k] = v, n.LineComment
	}
	return vals, comments, stdout.String()
}

func writeConfig(t *testing.T, dir string, kv map[string]string) string {
	t.Helper()
	var b strings.Builder
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := kv[k]
		if strings.Contains(v, ",") && !strings.Contains(k, "initial-cluster") {
			// A list flag, written as a YAML list.
			b.WriteString(k + ":\n")
			for _, item := range strings.Split(v, ",") {
				b.WriteString("  - " + item + "\n")
			}
			continue
		}
		b.WriteString(k + ": \"" + v + "\"\n")
	}
	p := filepath.Join(dir, "dkv.yaml")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Every serve flag can be set from --config-file and from its DKV_
// variable, and --print-config shows the value and where it came from.
func TestServeConfigEveryFlag(t *testing.T) {
	dir := t.TempDir()
	batch, alone := configSamples(dir)
	defaults := serveCmd(&cli.App{}).Flags()
	defaults.VisitAll(func(f *pflag.Flag) {
		if !configurable(f) {
			return
		}
		v, ok := batch[f.Name]
		if !ok {
			v, ok = alone[f.Name]
		}
		if !ok {
			t.Errorf("--%s has no sample in configSamples: add one, so the test shows it can come from the file and the environment", f.Name)
			return
		}
		if canonical(t, f.Name, v) == f.Value.String() {
			t.Errorf("--%s: sample %q is the default; pick another so the test can tell it was applied", f.Name, v)
		}
	})
	for _, set := range []map[string]string{batch, alone} {
		// From the file.
		vals, comments, out := printed(t, "--config-file", writeConfig(t, t.TempDir(), set))
		for name, v := range set {
			if secretFlags[name] {
				if _, shown := vals[name]; shown || !strings.Contains(out, "# "+name+" is set (from config file); not shown") {
					t.Errorf("--print-config shows secret %s, or does not say it is set:\n%s", name, out)
				}
				continue
			}
			if got, want := canonical(t, name, vals[name]), canonical(t, name, v); got != want {
				t.Errorf("%s from --config-file: printed %q, want %q", name, vals[name], v)
			}
			if !strings.Contains(comments[name], "from config file") {
				t.Errorf("%s from --config-file: comment %q, want it to say so", name, comments[name])
			}
		}
		// From the environment.
		t.Run("env", func(t *testing.T) {
			for name, v := range set {
				t.Setenv(envName(name), v)
			}
			vals, comments, _ := printed(t)
			for name, v := range set {
				if secretFlags[name] {
					continue
				}
				if got, want := canonical(t, name, vals[name]), canonical(t, name, v); got != want {
					t.Errorf("%s=%q: printed %q", envName(name), v, vals[name])
				}
				if !strings.Contains(comments[name], "from "+envName(name)) {
					t.Errorf("%s: comment %q, want it to name the variable", envName(name), comments[name])
				}
			}
		})
	}
}

// The command line wins over the environment, which wins over the file,
// which wins over the default; the file's own path may come from
// DKV_CONFIG_FILE.
func TestServeConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := writeConfig(t, dir, map[string]string{
		"name": "from-file", "cache-bytes": "16MiB", "join": "f1:1,f2:2", "pprof": "true", "request-timeout": "3s", "max-txn-ops": "10",
	})
	t.Setenv("DKV_CONFIG_FILE", file)
	t.Setenv("DKV_NAME", "from-env")
	t.Setenv("DKV_CACHE_BYTES", "32MiB")
	t.Setenv("DKV_JOIN", "e1:1")
	vals, comments, _ := printed(t, "--name", "from-flag", "--request-timeout", "9s")
	for _, c := range []struct{ key, want, from string }{
		{"name", "from-flag", "flag"},
		{"request-timeout", "9s", "flag"},
		{"cache-bytes", "32MiB", "DKV_CACHE_BYTES"},
		{"join", "e1:1", "DKV_JOIN"},
		{"pprof", "true", "config file"},
		{"max-txn-ops", "10", "config file"},
		{"data-dir", "./dkv-data", ""},
	} {
		if vals[c.key] != c.want {
			t.Errorf("%s = %q, want %q (from %s)", c.key, vals[c.key], c.want, c.from)
		}
		if c.from == "" && comments[c.key] != "" || c.from != "" && !strings.Contains(comments[c.key], "from "+c.from) {
			t.Errorf("%s: comment %q, want from %q", c.key, comments[c.key], c.from)
		}
	}
}

// Mistakes in the file or the environment are named, with the line or
// variable and what was probably meant; a client flag given to serve is
// refused, and serve's help lists only its own flags.
func TestServeConfigMistakes(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		file string
		want string
	}{
		{"name: n1\ndata_dir: /x\n", `line 2: unknown key "data_dir" (did you mean data-dir?)`},
		{"endpoints: 127.0.0.1:7861\n", `unknown key "endpoints"`},
		{"cache-bytes: lots\n", `invalid argument "lots" for "--cache-bytes" flag: "lots" is not a size`},
		{"tls:\n  min: 1.3\n", `unknown key "tls"`},
		{"join:\n  - a: 1\n", `join: a list may hold only plain values`},
		{"- a\n- b\n", "not a YAML mapping"},
		{"max-value-bytes: 65MiB\n", "max value bytes 68157440 out of range (0, 64 MiB]"},
	} {
		p := filepath.Join(dir, "bad.yaml")
		if err := os.WriteFile(p, []byte(c.file), 0o600); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		code := Server.Run([]string{"serve", "--print-config", "--config-file", p}, nil, &stdout, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("config %q: exit %d, stderr %q; want a usage error with %q", c.file, code, stderr.String(), c.want)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := Server.Run([]string{"serve", "--print-config", "--config-file", filepath.Join(dir, "none.yaml")}, nil, &stdout, &stderr); code != exitUsage ||
		!strings.Contains(stderr.String(), "--config-file: open") {
		t.Errorf("missing config file: exit %d, stderr %q", code, stderr.String())
	}

	t.Run("env", func(t *testing.T) {
		t.Setenv("DKV_DATADIR", "/tmp/x")
		t.Setenv("DKV_ENDPOINTS", "127.0.0.1:7861") // a client setting: no warning
		var stdout, stderr bytes.Buffer
		if code := Server.Run([]string{"serve", "--print-config"}, nil, &stdout, &stderr); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
		if want := "dkv serve: ignoring DKV_DATADIR: no serve flag is named by it (did you mean DKV_DATA_DIR?)"; !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr %q, want %q", stderr.String(), want)
		}
		if strings.Contains(stderr.String(), "DKV_ENDPOINTS") {
			t.Errorf("warned about the client's DKV_ENDPOINTS: %q", stderr.String())
		}
		t.Setenv("DKV_MAX_TXN_OPS", "many")
		stderr.Reset()
		if code := Server.Run([]string{"serve", "--print-config"}, nil, &stdout, &stderr); code != exitUsage ||
			!strings.Contains(stderr.String(), `DKV_MAX_TXN_OPS: invalid argument "many" for "--max-txn-ops" flag`) {
			t.Errorf("bad DKV_MAX_TXN_OPS: exit %d, stderr %q", code, stderr.String())
		}
	})

	stderr.Reset()
	if code := Server.Run([]string{"serve", "--endpoints", "127.0.0.1:7861", "--data-dir", dir}, nil, &stdout, &stderr); code != exitUsage ||
		!strings.Contains(stderr.String(), "--endpoints is a flag of the client commands; dkv serve does not take it") {
		t.Errorf("serve --endpoints: exit %d, stderr %q", code, stderr.String())
	}
	stdout.Reset()
	if code := Server.Run([]string{"serve", "--help"}, nil, &stdout, &stderr); code != 0 {
		t.Fatalf("serve --help: exit %d", code)
	}
	for _, client := range []string{"--endpoints", "--cacert", "--timeout", "--user", "Global Flags"} {
		if strings.Contains(stdout.String(), client) {
			t.Errorf("serve --help lists %s, which serve does not take", client)
		}
	}
	for _, own := range []string{"--config-file", "--print-config", "--data-dir", "--cache-bytes bytes"} {
		if !strings.Contains(stdout.String(), own) {
			t.Errorf("serve --help leaves out %s", own)
		}
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{
		"4096": 4096, "-1": -1, "0": 0, "512MiB": 512 << 20, "8GiB": 8 << 30, "8gib": 8 << 30, "100MB": 100e6,
		"1.5GiB": 3 << 29, "64 MiB": 64 << 20, "2KB": 2000, "3KiB": 3072, "1TiB": 1 << 40, "10B": 10,
	} {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "MiB", "lots", "1.2.3GB", "9999999TiB", "NaN", "Inf", "1 parsec"} {
		if got, err := parseBytes(bad); err == nil {
			t.Errorf("parseBytes(%q) = %d, want an error", bad, got)
		}
	}
	var n int
	if err := newByteSize(&n, 0).Set("3GiB"); err != nil || n != 3<<30 {
		t.Errorf("int byte size 3GiB: %d, %v", n, err)
	}
	for n, want := range map[int64]string{0: "0", 1 << 20: "1MiB", 3 << 29: "1536MiB", 1000: "1000", -1: "-1", 64 << 30: "64GiB"} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// The example file in docs/operations.md is one serve reads: every key a
// flag, every value one the flag takes.
func TestServeConfigDocExample(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```yaml\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/operations.md has no yaml block")
	}
	p := filepath.Join(t.TempDir(), "n1.yaml")
	if err := os.WriteFile(p, []byte(block), 0o600); err != nil {
		t.Fatal(err)
	}
	fs := serveCmd(&cli.App{}).LocalFlags()
	if err := fs.Set(configFileFlag, p); err != nil {
		t.Fatal(err)
	}
	from, err := applyConfig(fs, nil, &bytes.Buffer{})
	if err != nil {
		t.Fatalf("docs/operations.md's example: %v", err)
	}
	if from["cache-bytes"] != fromFile || fs.Lookup("cache-bytes").Value.String() != "1GiB" {
		t.Errorf("cache-bytes from the example: %s %s", from["cache-bytes"], fs.Lookup("cache-bytes").Value)
	}
}
