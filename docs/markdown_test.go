package docs

import (
	"bufio"
	"bytes"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// What the tests that run or compile the markdown files' examples share:
// reading the fenced blocks, matching a shown output with "..." in it,
// and the shell that runs the examples.

// fence is one fenced block of a markdown file.
type fence struct {
	lang string
	line int // of the opening fence
	body string
	// section is the text of the last heading above the block ("" before
	// the first), without its #s.
	section string
	// next is the block that follows with only blank lines between.
	next *fence
}

var heading = regexp.MustCompile(`^#{1,6}(?: (.*))?$`)

// fences returns the fenced blocks of a markdown file, in order.
func fences(src []byte) []*fence {
	var out []*fence
	var cur *fence
	var b strings.Builder
	indent := ""       // of the open fence, taken off its lines (a block in a list)
	blankSince := true // only blank lines since the last closing fence
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(src))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			indent = line[:len(line)-len(strings.TrimLeft(line, " \t"))]
			lang, _, _ := strings.Cut(strings.TrimSpace(strings.TrimPrefix(trimmed, "```")), " ")
			cur = &fence{lang: lang, line: n, section: section}
			if len(out) > 0 && blankSince {
				out[len(out)-1].next = cur
			}
			b.Reset()
		case cur != nil && trimmed == "```":
			cur.body = b.String()
			out = append(out, cur)
			cur = nil
			blankSince = true
		case cur != nil:
			b.WriteString(strings.TrimPrefix(line, indent))
			b.WriteByte('\n')
		case trimmed != "":
			blankSince = false
			if m := heading.FindStringSubmatch(line); m != nil {
				section = strings.TrimSpace(m[1])
			}
		}
	}
	return out
}

// globMatch reports whether s matches pattern, in which "..." stands for
// anything. protojson's messages vary their spaces on purpose (a space
// or a no-break space): both are spaces here.
func globMatch(pattern, s string) bool {
	s = strings.ReplaceAll(s, "\u00a0", " ")
	parts := strings.Split(pattern, "...")
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	for i, p := range parts[1:] {
		if i == len(parts)-2 {
			return strings.HasSuffix(s, p)
		}
		j := strings.Index(s, p)
		if j < 0 {
			return false
		}
		s = s[j+len(p):]
	}
	return s == ""
}

// lookBash is the bash that runs the examples; without one the test is
// skipped.
func lookBash(t *testing.T) string {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash to run the examples")
	}
	return bash
}
