package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client/recipe"
	"github.com/dkv-io/dkv/examples/internal/proctest"
	"github.com/dkv-io/dkv/internal/testutil"
)

// TestCanaryProcesses is the canary over real traffic: a 3-member
// cluster; per run, a baseline and a canary HTTP instance, the proxy
// routing by the flag's sticky rollout, a load generator, and two
// controllers of which one leads. A healthy canary reaches 100%, one
// decision per stage, though the leading controller is killed (SIGKILL)
// after its first decision; one
// failing 5% of its requests (switched on in the store) is rolled back;
// a fault that hits both variants alike (during the 5 and 25% stages)
// does not roll back the canary, whose leading controller is frozen (SIGSTOP) after its first decision
// and continued once the other has decided: it decides nothing more.
func TestCanaryProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts dkv and example processes; skipped with -short")
	}
	bin := proctest.Example(t, "canary")
	_, c, endpoints := proctest.Cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, tc := range []struct {
		rollout string
		inject  map[string]string // variant (or "dependency") → error rate
		final   int
	}{
		{"healthy", nil, 100},
		{"faulty", map[string]string{"canary": "0.05"}, 0},
		{"outage", map[string]string{"dependency": "0.2"}, 100},
	} {
		t.Run(tc.rollout, func(t *testing.T) {
			for v, rate := range tc.inject {
				if _, err := c.Put(ctx, InjectKey(tc.rollout, v), []byte(rate)); err != nil {
					t.Fatal(err)
				}
			}
			dir := t.TempDir()
			var procs []*testutil.Process
			start := func(name string, args ...string) {
				args = append([]string{"--instance", name, "--rollout", tc.rollout, "--endpoints", endpoints}, args...)
				procs = append(procs, testutil.StartProcess(t, filepath.Join(dir, name+".log"), bin, args...))
			}
			t.Cleanup(func() {
				for _, p := range procs {
					p.Stop()
				}
				if t.Failed() || testing.Verbose() {
					for _, p := range procs {
						t.Logf("%s:\n%s", filepath.Base(p.Log), p.LogTail(30))
					}
				}
			})
			base, can, proxy := testutil.FreeAddr(t), testutil.FreeAddr(t), testutil.FreeAddr(t)
			start("controller-a")
			start("controller-b")
			start("baseline", "--listen", base)
			start("canary", "--listen", can)
			start("proxy", "--listen", proxy, "--baseline", "http://"+base, "--canary", "http://"+can)
			testutil.EventuallyNoError(t, 30*time.Second, "the proxy to serve", func(ctx context.Context) error {
				req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+proxy+"/checkout?user=0", nil)
				resp, err := http.DefaultClient.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				return err
			})
			start("loadgen", "--target", "http://"+proxy, "--rps", "1000")

			// firstDecision waits for a decisive record after n of them
			// and returns it.
			firstDecision := func(n int) recipe.CanaryRecord {
				t.Helper()
				var rec recipe.CanaryRecord
				testutil.EventuallyNoError(t, 60*time.Second, "a decision", func(ctx context.Context) error {
					recs, err := recipe.Decisions(ctx, c, tc.rollout)
					seen := 0
					for _, r := range recs {
						if r.Decision != "wait" {
							if seen++; seen > n {
								rec = r
								return nil
							}
						}
					}
					if err == nil {
						err = errors.New("none yet")
					}
					return err
				})
				return rec
			}
			// leaderIn is the controller that led in term.
			leaderIn := func(term int64) *testutil.Process {
				t.Helper()
				for _, p := range procs[:2] {
					b, _ := os.ReadFile(p.Log)
					if strings.Contains(string(b), fmt.Sprintf("] leader term=%d\n", term)) {
						return p
					}
				}
				t.Fatalf("no controller's log says it led in term %d", term)
				return nil
			}
			var frozen *testutil.Process
			switch tc.rollout {
			case "healthy":
				// The leading controller is killed (SIGKILL) after its first
				// decision; the other goes on from the recorded stage.
				leaderIn(firstDecision(0).Term).Kill()
			case "outage":
				// The leading controller is frozen (SIGSTOP) after its first
				// decision; once the other has decided, it is continued: it
				// must not decide, and campaigns again.
				first := firstDecision(0)
				frozen = leaderIn(first.Term)
				if err := frozen.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
					t.Fatal(err)
				}
				if next := firstDecision(1); next.Term == first.Term {
					t.Fatalf("decision %+v made in the frozen leader's term", next)
				}
				if err := frozen.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
					t.Fatal(err)
				}
				// The outage ends with the 25% stage: at 100% the baseline
				// serves nothing to compare with.
				if _, err := c.Put(ctx, InjectKey(tc.rollout, "dependency"), []byte("0")); err != nil {
					t.Fatal(err)
				}
			}
			var decisive []recipe.CanaryRecord
			testutil.EventuallyNoError(t, 90*time.Second, "the rollout to finish", func(ctx context.Context) error {
				recs, err := recipe.Decisions(ctx, c, tc.rollout)
				if err != nil {
					return err
				}
				decisive = decisive[:0]
				for _, r := range recs {
					if r.Decision != "wait" {
						decisive = append(decisive, r)
					}
				}
				if n := len(decisive); n > 0 && (decisive[n-1].Decision == "rollback" || decisive[n-1].Next == 100 && decisive[n-1].Percent == 100) {
					return nil
				}
				return fmt.Errorf("decisions so far: %v", summary(decisive))
			})
			// The decision is recorded before the flag is set.
			var f *recipe.Flag
			testutil.EventuallyNoError(t, 30*time.Second, "the flag to be set as decided", func(ctx context.Context) error {
				var err error
				f, err = recipe.GetFlag(ctx, c, "examples."+tc.rollout)
				if err == nil && int(f.Rollout.Percent) != decisive[len(decisive)-1].Next {
					err = fmt.Errorf("the flag is at %v%%", f.Rollout.Percent)
				}
				return err
			})
			var rollbacks int
			for _, r := range decisive {
				if r.Canary.Requests < recipe.DefaultCanaryMinRequests {
					t.Errorf("decided %s at %d%% on %d canary requests; the rule needs %d",
						r.Decision, r.Percent, r.Canary.Requests, recipe.DefaultCanaryMinRequests)
				}
				if r.Decision == "rollback" {
					rollbacks++
				}
			}
			if int(f.Rollout.Percent) != tc.final || (tc.final == 0) != (rollbacks == 1) {
				t.Errorf("the flag ends at %v%% after %v; want %d%%", f.Rollout.Percent, summary(decisive), tc.final)
			}
			if tc.final == 100 && len(decisive) != len(recipe.DefaultCanaryStages) {
				t.Errorf("decisions %v: want one proceed per stage", summary(decisive))
			}
			if tc.rollout != "faulty" && decisive[0].Term == decisive[len(decisive)-1].Term {
				t.Errorf("every decision in term %d: the first leader's successor decided nothing", decisive[0].Term)
			}
			if frozen != nil {
				testutil.Eventually(t, 30*time.Second, "the continued controller to campaign again", func() bool {
					b, _ := os.ReadFile(frozen.Log)
					return strings.Count(string(b), "] campaigning ") > 1
				})
			}
			for _, p := range procs {
				if !p.Running() {
					continue // killed
				}
				p.Stop()
				if err := p.Err(); err != nil {
					t.Errorf("%s on SIGTERM: %v, want a clean exit", filepath.Base(p.Log), err)
				}
			}
		})
	}
}

func summary(rs []recipe.CanaryRecord) []string {
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%s@%d", r.Decision, r.Percent))
	}
	return out
}
