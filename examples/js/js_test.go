// Package js runs the JavaScript examples' tests (*.test.mjs, node:test)
// against a 3-member DKV cluster of real processes, as part of go test.
// The examples themselves are JavaScript: see README.md.
package js

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dkv-io/dkv/examples/internal/langtest"
)

func TestJavaScriptExamples(t *testing.T) {
	node := langtest.Tool(t, "node", "Node.js 18 or later: apt-get install nodejs",
		"-e", "process.exit(Number(process.versions.node.split('.')[0]) < 18 ? 1 : 0)")
	urls, c := langtest.Cluster(t)
	env := []string{"DKV_HTTP=" + strings.Join(urls, ",")}
	for _, file := range []string{"cart.test.mjs", "election.test.mjs"} {
		t.Run(file, func(t *testing.T) {
			out := langtest.Run(t, c, ".", env, 3*time.Minute, node, "--test-reporter=tap", "--test", file)
			// node --test passes a run whose tests skipped: here that is
			// a test that did not run.
			if !regexp.MustCompile(`(?m)^# skipped 0$`).MatchString(out) || !regexp.MustCompile(`(?m)^# fail 0$`).MatchString(out) {
				t.Fatalf("node --test %s: a test failed or was skipped", file)
			}
		})
	}
}
