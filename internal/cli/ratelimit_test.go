package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/dkv-io/dkv/internal/cli/clitest"
)

func TestCLISyncRecipes(t *testing.T) {
	n := clitest.StartServe(t, t.TempDir())

	// A bucket of 2 that refills once an hour: two allowed, then refused
	// with exit 4 (Conflict).
	for _, want := range []string{"allowed remaining=1 limit=2", "allowed remaining=0 limit=2"} {
		if got := n.OK("", "ratelimit", "api", "--rate", "1/h", "--burst", "2"); !strings.HasPrefix(got, want) {
			t.Fatalf("got %q, want %q...", got, want)
		}
	}
	r := n.Fails(4, "Error: Conflict: rate limit \"api\": 1 token not allowed now, retry after ", "ratelimit", "api", "--rate", "1/h", "--burst", "2")
	if !strings.HasPrefix(r.Stdout, "refused remaining=0") {
		t.Fatalf("refusal printed %q", r.Stdout)
	}
	var d struct {
		Allowed      bool  `json:"allowed"`
		Remaining    int64 `json:"remaining"`
		RetryAfterMs int64 `json:"retry_after_ms"`
	}
	if err := json.Unmarshal([]byte(n.OK("", "ratelimit", "other", "--rate", "100/s", "--burst", "5", "-n", "5", "-o", "json")), &d); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Fatalf("json decision %+v %v", d, err)
	}
	// Bad input names the limit and exits 6.
	n.Fails(6, "Error: InvalidInput: rate \"0/s\"", "ratelimit", "api", "--rate", "0/s")
	n.Fails(6, "Error: InvalidInput: rate limit burst is -1", "ratelimit", "api", "--rate", "10/s", "--burst", "-1")
	n.Fails(6, "Error: InvalidInput: rate limit n is 3: it must be 1 to the burst, 2", "ratelimit", "api", "--rate", "10/s", "--burst", "2", "-n", "3")

	// dkv semaphore runs the command with its permit and passes its exit
	// code on.
	out := n.OK("", "semaphore", "printers", "-n", "2", "--", "sh", "-c", `echo "slot=$DKV_SEMAPHORE_SLOT token=$DKV_LOCK_TOKEN"`)
	if !strings.HasPrefix(out, "slot=0 token=") || strings.HasPrefix(out, "slot=0 token=\n") {
		t.Fatalf("semaphore command printed %q", out)
	}
	n.Fails(3, "", "semaphore", "printers", "-n", "2", "--", "sh", "-c", "exit 3")
	// The permit's handle fences writes while held.
	n.OK("", "semaphore", "printers", "-n", "2", "--", "sh", "-c", `"$0" put printers/out done --lock "$DKV_LOCK_HANDLE"`, clitest.Bin)
	if got := n.OK("", "get", "printers/out"); got != "done\n" {
		t.Fatalf("fenced write from the command: %q", got)
	}

	// A barrier: wait passes when it is down, hold raises it (twice is a
	// conflict), release lowers it.
	n.OK("", "barrier", "wait", "deploy")
	n.OK("", "barrier", "hold", "deploy")
	n.Fails(4, "Error: Conflict", "barrier", "hold", "deploy")
	n.OK("", "barrier", "release", "deploy")
	n.OK("", "barrier", "wait", "deploy")
}
