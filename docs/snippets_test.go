// Package docs holds no code: its test compiles every Go snippet in the
// repository's README.md and docs/*.md, so that what a reader copies
// type-checks against the current API.
//
// The convention for a ```go block:
//
//   - A block made only of declarations (import, type, func, var, const)
//     is a file body: it is compiled as is, in package main.
//   - Any other block is a fragment: the statements of a function
//     func(ctx context.Context, c *client.Client) error, so `ctx` and `c`
//     are declared for it, and `return err` works. Anything else it uses
//     it must declare itself (`data := []byte("...")`). Placeholders are
//     comments (`/* ... */`), not a bare `...`.
//   - import lines in a fragment are hoisted to the file. context,
//     errors, fmt, log, time, client and client/concurrency are imported
//     for every snippet.
//   - Unused variables and imports are allowed: a snippet shows a call
//     without having to use its result. Every other compile error fails
//     the test with the file, the block's line and the message.
package docs

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// snippet is one ```go block.
type snippet struct {
	file string
	line int // of the first code line
	code string
}

// extract returns the ```go blocks of a markdown file.
func extract(file string, src []byte) []snippet {
	var out []snippet
	for _, f := range fences(src) {
		if f.lang == "go" {
			out = append(out, snippet{file: file, line: f.line + 1, code: f.body})
		}
	}
	return out
}

// defaultImports are imported for every snippet (unused ones are fine).
var defaultImports = []string{
	"context", "errors", "fmt", "log", "time",
	"github.com/dkv-io/dkv/client",
	"github.com/dkv-io/dkv/client/concurrency",
}

var importLine = regexp.MustCompile(`^\s*import\s+(\(|"[^"]+")`)

// render turns a snippet into a Go file; lineOffset is how many lines of
// the file come before the snippet's first line (for error positions).
func render(s snippet) (src string, lineOffset int) {
	imports := map[string]bool{}
	for _, p := range defaultImports {
		imports[p] = true
	}
	// Hoist import lines (single or grouped) out of the body.
	var body []string
	lines := strings.Split(s.code, "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		m := importLine.FindStringSubmatch(l)
		if m == nil {
			body = append(body, l)
			continue
		}
		if m[1] == "(" {
			for i++; i < len(lines) && strings.TrimSpace(lines[i]) != ")"; i++ {
				if p := strings.TrimSpace(lines[i]); p != "" {
					imports[strings.Trim(p[strings.Index(p, `"`):], `"`)] = true
				}
				body = append(body, "")
			}
		} else {
			imports[strings.Trim(m[1], `"`)] = true
		}
		body = append(body, "")
	}
	var head strings.Builder
	head.WriteString("package main\n\nimport (\n")
	for p := range imports {
		fmt.Fprintf(&head, "\t%q\n", p)
	}
	head.WriteString(")\n\n")
	code := strings.Join(body, "\n")
	if declsOnly(code) {
		h := head.String() + "\n"
		return h + code, strings.Count(h, "\n")
	}
	h := head.String() + "func snippet(ctx context.Context, c *client.Client) error {\n"
	return h + code + "\nreturn nil\n}\n", strings.Count(h, "\n")
}

// declsOnly reports whether code parses as top-level declarations.
func declsOnly(code string) bool {
	if strings.TrimSpace(code) == "" {
		return true
	}
	_, err := parser.ParseFile(token.NewFileSet(), "", "package p\n"+code, parser.SkipObjectResolution)
	return err == nil
}

// exportData maps import paths to compiled export data, from `go list
// -export`, so go/types can load the real packages without parsing them.
func exportData(t *testing.T, pkgs []string) map[string]string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-export", "-deps", "-f", "{{if .Export}}{{.ImportPath}}={{.Export}}{{end}}"}, pkgs...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -export: %v\n%s", err, stderr.String())
	}
	m := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			m[k] = v
		}
	}
	return m
}

// allowed are the soft errors a snippet may have.
func allowed(msg string) bool {
	return strings.Contains(msg, "declared and not used") || strings.Contains(msg, "imported and not used")
}

// check type-checks a rendered snippet and returns its hard errors, with
// positions in the markdown file.
func check(s snippet, exports map[string]string) []string {
	src, off := render(s)
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "snippet.go", src, parser.SkipObjectResolution)
	if err != nil {
		return []string{"does not parse: " + relocate(err.Error(), s, off)}
	}
	var errs []string
	conf := types.Config{
		Importer: importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
			p, ok := exports[path]
			if !ok {
				return nil, fmt.Errorf("package %s is not available to snippets (add it to defaultImports' go list)", path)
			}
			return os.Open(p)
		}),
		Error: func(err error) {
			if te, ok := err.(types.Error); ok && allowed(te.Msg) {
				return
			}
			errs = append(errs, relocate(err.Error(), s, off))
		},
	}
	conf.Check("main", fset, []*ast.File{f}, nil)
	return errs
}

var posRE = regexp.MustCompile(`snippet\.go:(\d+):(\d+)`)

// relocate rewrites snippet.go:L:C into the markdown file's line.
func relocate(msg string, s snippet, off int) string {
	return posRE.ReplaceAllStringFunc(msg, func(m string) string {
		var l, c int
		fmt.Sscanf(posRE.FindStringSubmatch(m)[1]+" "+posRE.FindStringSubmatch(m)[2], "%d %d", &l, &c)
		return fmt.Sprintf("%s:%d:%d", s.file, s.line+l-1-off, c)
	})
}

// markdownFiles are README.md and docs/*.md, relative to the repo root.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"../README.md"}, files...)
}

func TestGoSnippetsCompile(t *testing.T) {
	var all []snippet
	for _, f := range markdownFiles(t) {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := "docs/" + f
		if f == "../README.md" {
			name = "README.md"
		}
		all = append(all, extract(name, src)...)
	}
	if len(all) == 0 {
		t.Fatal("no ```go blocks found: the extractor is broken")
	}
	pkgs := map[string]bool{}
	for _, p := range defaultImports {
		pkgs[p] = true
	}
	for _, s := range all {
		src, _ := render(s)
		f, err := parser.ParseFile(token.NewFileSet(), "", src, parser.ImportsOnly)
		if err != nil {
			continue // reported by check
		}
		for _, im := range f.Imports {
			pkgs[strings.Trim(im.Path.Value, `"`)] = true
		}
	}
	var list []string
	for p := range pkgs {
		list = append(list, p)
	}
	exports := exportData(t, list)
	for _, s := range all {
		for _, e := range check(s, exports) {
			t.Errorf("%s", e)
		}
	}
	t.Logf("%d snippets checked", len(all))
}

// TestSnippetCheckerCatches shows the checker is not a rubber stamp: the
// mistakes README.md once had are reported, and a fragment's unused
// result is not.
func TestSnippetCheckerCatches(t *testing.T) {
	exports := exportData(t, defaultImports)
	bad := []snippet{
		{file: "x.md", line: 1, code: "type Cart struct{ Items []string }\n_ = client.PutJSON(ctx, c, \"cart/alice\", Cart{})\n"},
		{file: "x.md", line: 1, code: "c.Txn(ctx).If(client.Value(\"job/1\").Equal(\"pending\"))\n"},
		{file: "x.md", line: 1, code: "if err != nil { ... }\n"},
	}
	for _, s := range bad {
		if errs := check(s, exports); len(errs) == 0 {
			t.Errorf("snippet %q passed the check; it does not compile", s.code)
		}
	}
	good := snippet{file: "x.md", line: 1, code: "kv, err := c.Get(ctx, \"a\")\n"}
	if errs := check(good, exports); len(errs) != 0 {
		t.Errorf("an unused result was reported: %v", errs)
	}
}
