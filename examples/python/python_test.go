// Package python runs the Python examples' tests (test_*.py, unittest)
// against a 3-member DKV cluster of real processes, as part of go test.
// The examples themselves are Python: see README.md.
package python

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dkv-io/dkv/examples/internal/langtest"
)

func TestPythonExamples(t *testing.T) {
	py := langtest.Tool(t, "python3", "Python 3.9 or later: apt-get install python3",
		"-c", "import sys; sys.exit(sys.version_info < (3, 9))")
	urls, c := langtest.Cluster(t)
	env := []string{"DKV_HTTP=" + strings.Join(urls, ","), "PYTHONDONTWRITEBYTECODE=1"}
	for _, mod := range []string{"test_cart", "test_election", "test_reconcile"} {
		t.Run(mod, func(t *testing.T) {
			out := langtest.Run(t, c, ".", env, 3*time.Minute, py, "-m", "unittest", "-v", mod)
			// unittest passes a run whose tests skipped: here that is a
			// test that did not run.
			if m := regexp.MustCompile(`(?m)^OK \(skipped=\d+\)|\.\.\. skipped`).FindString(out); m != "" {
				t.Fatalf("a test was skipped (%q): every one must run here", m)
			}
			if !regexp.MustCompile(`(?m)^OK$`).MatchString(out) {
				t.Fatalf("unittest did not report OK")
			}
		})
	}
}
