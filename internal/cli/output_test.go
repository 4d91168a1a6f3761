package cli_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/internal/cli/clitest"
)

// Output that scripts and people read (issue 13, defect 10).
func TestCLIOutputForScriptsAndPeople(t *testing.T) {
	n := clitest.StartServe(t, t.TempDir())

	t.Run("lease grant prints the bare id", func(t *testing.T) {
		n := with(n, t)
		out := n.OK("", "lease", "grant", "30s")
		if !regexp.MustCompile(`^[0-9]+\n$`).MatchString(out) {
			t.Fatalf("lease grant printed %q, want the bare id", out)
		}
		id := strings.TrimSpace(out)
		if got := n.OK("", "lease", "ttl", id); !strings.HasPrefix(got, "lease "+id+" granted with TTL 30s") {
			t.Fatalf("the printed id does not work with lease ttl: %q", got)
		}
	})

	t.Run("errors name their kind once", func(t *testing.T) {
		n := with(n, t)
		n.OK("", "put", "e/x", "1")
		n.OK("", "put", "e/x", "2")
		r := n.OK("", "-o", "json", "put", "e/x", "3")
		var put struct{ Revision int64 }
		if err := json.Unmarshal([]byte(r), &put); err != nil {
			t.Fatal(err)
		}
		n.OK("", "compact", strconv.FormatInt(put.Revision, 10))
		for _, tc := range []struct {
			code int
			args []string
			want string
		}{
			{8, []string{"watch", "e/x", "--rev", "1"}, "Error: Compacted: revision 1 has been compacted"},
			{8, []string{"get", "e/x", "--rev", "1"}, "Error: Compacted: revision 1 has been compacted"},
			{3, []string{"get", "e/missing"}, `Error: NotFound: key "e/missing" not found`},
		} {
			r := n.Fails(tc.code, tc.want, tc.args...)
			if strings.Contains(r.Stderr, "Compacted: Compacted") || strings.Contains(r.Stderr, "not found: key") {
				t.Errorf("dkv %q: %q repeats its prefix", tc.args, r.Stderr)
			}
		}
		n.OK("", "lock", "acquire", "e/lk", "--ttl", "30s")
		r2 := n.Fails(5, "Error: Locked: ", "lock", "acquire", "e/lk", "--ttl", "30s")
		if strings.Contains(strings.ToLower(r2.Stderr), "locked: locked") {
			t.Errorf("lock acquire of a held lock: %q repeats its prefix", r2.Stderr)
		}
	})

	t.Run("member ids are decimal strings everywhere", func(t *testing.T) {
		n := with(n, t)
		c, err := client.New(context.Background(), client.Config{Endpoints: []string{n.Addr}, AutoSyncInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		st, err := c.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		want := strconv.FormatUint(st.GetMemberId(), 10)
		var js struct {
			MemberID string `json:"member_id"`
			LeaderID string `json:"leader_id"`
		}
		if err := json.Unmarshal([]byte(n.OK("", "-o", "json", "status")), &js); err != nil {
			t.Fatal(err)
		}
		if js.MemberID != want || js.LeaderID != want {
			t.Errorf("status -o json ids %q, %q; want %q (decimal, as the HTTP API prints them)", js.MemberID, js.LeaderID, want)
		}
		var ml struct {
			Members []struct{ ID string } `json:"members"`
		}
		if err := json.Unmarshal([]byte(n.OK("", "-o", "json", "member", "list")), &ml); err != nil {
			t.Fatal(err)
		}
		if len(ml.Members) != 1 || ml.Members[0].ID != want {
			t.Errorf("member list -o json: %+v, want id %q", ml, want)
		}
		if got := n.OK("", "member", "list"); !strings.Contains(got, want) {
			t.Errorf("member list does not show id %s:\n%s", want, got)
		}
		// Commands taking a member NAME take its id too, decimal or hex.
		for _, arg := range []string{want, fmt.Sprintf("0x%x", st.GetMemberId()), fmt.Sprintf("%x", st.GetMemberId())} {
			if got := n.OK("", "leader", "transfer", arg); got != "default ("+want+") is the leader\n" {
				t.Errorf("leader transfer %s printed %q", arg, got)
			}
		}
	})

	t.Run("status names the leader and gives db size a unit", func(t *testing.T) {
		n := with(n, t)
		got := n.OK("", "status")
		if !regexp.MustCompile(`(?m)^leader: +default \([0-9]+\)$`).MatchString(got) {
			t.Errorf("status does not name the leader:\n%s", got)
		}
		if !regexp.MustCompile(`(?m)^db size: +[0-9.]+ (KiB|MiB|GiB) \([0-9]+ bytes\)$`).MatchString(got) {
			t.Errorf("status db size has no unit:\n%s", got)
		}
	})

	t.Run("lease list has a header and the remaining time", func(t *testing.T) {
		n := with(n, t)
		id := strings.TrimSpace(n.OK("", "lease", "grant", "1m"))
		got := n.OK("", "lease", "list")
		lines := strings.Split(strings.TrimSpace(got), "\n")
		if f := strings.Fields(lines[0]); strings.Join(f, " ") != "ID GRANTED TTL REMAINING" {
			t.Fatalf("lease list header %q", lines[0])
		}
		found := false
		for _, l := range lines[1:] {
			f := strings.Fields(l)
			if len(f) == 3 && f[0] == id {
				found = true
				if f[1] != "1m0s" {
					t.Errorf("granted TTL %q", f[1])
				}
				if d, err := time.ParseDuration(f[2]); err != nil || d <= 0 || d > time.Minute {
					t.Errorf("remaining %q is not a duration within the TTL", f[2])
				}
			}
		}
		if !found {
			t.Errorf("lease %s not listed:\n%s", id, got)
		}
	})

	t.Run("lease keepalive prints every renewal", func(t *testing.T) {
		n := with(n, t)
		// 5s: renewed every ~1.7s; a shorter TTL can run out while a
		// race-built dkv starts.
		id := strings.TrimSpace(n.OK("", "lease", "grant", "5s"))
		cmd := exec.Command(clitest.Bin, "lease", "keepalive", id)
		cmd.Env = append(os.Environ(), "DKV_ENDPOINTS="+n.Addr)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { cmd.Process.Kill(); cmd.Wait() }()
		lines := make(chan string)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		re := regexp.MustCompile(`^lease ` + id + ` renewed at [0-9:]+, remaining [0-9.]+m?s$`)
		for i := 0; i < 3; i++ {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("keepalive stopped after %d lines", i)
				}
				if !re.MatchString(l) {
					t.Fatalf("keepalive line %d: %q", i, l)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("keepalive printed %d lines in 20s, want a line per renewal", i)
			}
		}
	})

	t.Run("version", func(t *testing.T) {
		n := with(n, t)
		for _, args := range [][]string{{"version"}, {"--version"}} {
			r := n.DKV("", args...)
			if r.Code != 0 || !strings.HasPrefix(r.Stdout, "dkv version ") {
				t.Errorf("dkv %v: exit %d, %q %q", args, r.Code, r.Stdout, r.Stderr)
			}
		}
	})
}

// with returns n bound to t, so that a subtest's failure stops only that
// subtest.
func with(n *clitest.Node, t *testing.T) *clitest.Node {
	c := *n
	c.T = t
	return &c
}
