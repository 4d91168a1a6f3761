package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dkv-io/dkv/internal/testutil"
	"github.com/dkv-io/dkv/server/servertest"
)

const composeFile = "../deploy/docker-compose.yml"

// composeCommand is how Compose runs here: the docker CLI's compose
// plugin (v2) or else the standalone docker-compose (v1). The deploy
// file and its docs are written for both.
func composeCommand(t *testing.T) []string {
	t.Helper()
	if exec.Command("docker", "compose", "version").Run() == nil {
		return []string{"docker", "compose"}
	}
	if _, err := exec.LookPath("docker-compose"); err == nil {
		return []string{"docker-compose"}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("Compose is not installed: neither `docker compose` (v2) nor `docker-compose` (v1); .ci/run installs Debian's docker-compose")
	}
	t.Skip("Compose is not installed: neither `docker compose` (v2) nor `docker-compose` (v1)")
	return nil
}

// endpointStatusRow is a row of `dkv -o json endpoint status`.
type endpointStatusRow struct {
	Endpoint string `json:"endpoint"`
	Status   *struct {
		Name     string `json:"name"`
		MemberID string `json:"member_id"`
		LeaderID string `json:"leader_id"`
	} `json:"status"`
	Error string `json:"error"`
}

// checkThreeMembers says what is wrong with an endpoint status answer
// ("" if nothing): it must have a row from each of n1, n2 and n3 at the
// endpoints want, no errors, and all three must name one of them leader.
func checkThreeMembers(out []byte, want []string) string {
	var rows []endpointStatusRow
	if err := json.Unmarshal(out, &rows); err != nil {
		return fmt.Sprintf("not endpoint status JSON (%v): %s", err, out)
	}
	var eps, names, ids []string
	leaders := map[string]bool{}
	for _, r := range rows {
		if r.Error != "" || r.Status == nil {
			return fmt.Sprintf("%s did not answer: %s", r.Endpoint, r.Error)
		}
		eps = append(eps, r.Endpoint)
		names = append(names, r.Status.Name)
		ids = append(ids, r.Status.MemberID)
		leaders[r.Status.LeaderID] = true
	}
	slices.Sort(eps)
	slices.Sort(names)
	if !slices.Equal(eps, want) || !slices.Equal(names, []string{"n1", "n2", "n3"}) {
		return fmt.Sprintf("rows from %v named %v, want %v named n1, n2, n3", eps, names, want)
	}
	if len(leaders) != 1 {
		return fmt.Sprintf("the members name different leaders: %s", out)
	}
	for l := range leaders {
		if !slices.Contains(ids, l) {
			return fmt.Sprintf("no leader among the members yet: %s", out)
		}
	}
	return ""
}

// leaderEndpoint is the endpoint, of those in env (DKV_ENDPOINTS=...),
// at which the leader answers.
func leaderEndpoint(t *testing.T, dkv func(env []string, args ...string) ([]byte, error), env string) string {
	t.Helper()
	out, err := dkv([]string{env}, "-o", "json", "endpoint", "status")
	var rows []endpointStatusRow
	if err := json.Unmarshal(out, &rows); err != nil {
		t.Fatalf("endpoint status printed %s (%v)", out, err)
	}
	for _, r := range rows {
		if r.Status != nil && r.Status.MemberID == r.Status.LeaderID {
			return r.Endpoint
		}
	}
	t.Fatalf("no endpoint is the leader: %s (%v)", out, err)
	return ""
}

// documentedLine is the line of deploy/docker-compose.yml's header
// comment that contains marker, without the comment prefix.
func documentedLine(t *testing.T, marker string) string {
	t.Helper()
	data, err := os.ReadFile(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "#") {
			break
		}
		if strings.Contains(line, marker) {
			return strings.TrimSpace(strings.TrimPrefix(line, "#"))
		}
	}
	t.Fatalf("%s's header comment has no line with %q", composeFile, marker)
	return ""
}

// TestDeployComposeFromTheHost runs deploy/docker-compose.yml with this
// tree's image, from a fresh project, and the commands its header
// comment gives: from the host, `dkv endpoint status` with DKV_ENDPOINTS
// as exported there must get an answer from all three members, and
// `dkv member list` every member's reachability; the `exec ... endpoint
// status --cluster` line must get all three inside the network; no
// member may warn at start. Neither may the image's default command,
// as README's `docker run` starts it: a lone member, whose advertised
// client address is the one that run publishes.
func TestDeployComposeFromTheHost(t *testing.T) {
	needDocker(t)
	compose := composeCommand(t)
	t.Logf("compose: %s", strings.Join(compose, " "))
	id := dockerTestID()
	image := buildImage(t, id)
	bin := testutil.DKVBinary(t)
	// The file publishes fixed ports; on a loopback address of its own a
	// run cannot collide with a cluster already on this host.
	ip := fmt.Sprintf("127.%d.%d.%d", 1+rand.IntN(254), rand.IntN(256), 1+rand.IntN(254))

	// poll calls try until it finds nothing wrong (returns ""), for at
	// most timeout.
	poll := func(t *testing.T, what string, timeout time.Duration, try func() string) {
		t.Helper()
		deadline := time.Now().Add(timeout)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			why := try()
			if why == "" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: still after %v: %s", what, timeout, why)
			}
			<-tick.C
		}
	}
	// dkv runs this tree's dkv on the host, with env added to the
	// environment, and returns what it printed on stdout.
	dkv := func(env []string, args ...string) ([]byte, error) {
		cmd := exec.Command(bin, append([]string{"--timeout", "3s"}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			err = fmt.Errorf("dkv %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
		}
		return out, err
	}
	noWarnings := func(t *testing.T, who, logs string) {
		t.Helper()
		for _, line := range strings.Split(logs, "\n") {
			if strings.Contains(line, "level=WARN") {
				t.Errorf("%s warned at start: %s", who, line)
			}
		}
	}

	t.Run("image default command", func(t *testing.T) {
		name := id + "-single"
		t.Cleanup(func() { docker("rm", "-f", "-v", name) })
		if _, err := docker("run", "-d", "--name", name, "-p", ip+":7861:7861", image); err != nil {
			t.Fatal(err)
		}
		var ml struct {
			Members []struct {
				ClientURL string `json:"client_url"`
			} `json:"members"`
		}
		poll(t, "the lone member lists itself with its client address", 30*time.Second, func() string {
			out, err := dkv(nil, "--endpoints", ip+":7861", "-o", "json", "member", "list")
			if err != nil {
				return err.Error()
			}
			// The member publishes its client address once it is ready.
			if err := json.Unmarshal(out, &ml); err != nil || len(ml.Members) != 1 || ml.Members[0].ClientURL == "" {
				return fmt.Sprintf("member list printed %s (%v)", out, err)
			}
			return ""
		})
		if got := ml.Members[0].ClientURL; got != "127.0.0.1:7861" {
			t.Errorf("the lone member advertises client address %s, want 127.0.0.1:7861, where docker run -p 127.0.0.1:7861:7861 publishes it", got)
		}
		logs, err := docker("logs", name)
		if err != nil {
			t.Fatal(err)
		}
		noWarnings(t, "the image's default command", logs)
	})

	t.Run("compose", func(t *testing.T) {
		env := append(os.Environ(), "DKV_CLUSTER_TOKEN="+servertest.RandomToken(), "DKV_IMAGE="+image, "DKV_PUBLISH_IP="+ip)
		// run runs Compose on the file as this test's project and returns
		// its stdout.
		run := func(args ...string) (string, error) {
			argv := append(slices.Clone(compose[1:]), "-p", id, "-f", composeFile)
			cmd := exec.Command(compose[0], append(argv, args...)...)
			cmd.Env = env
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				return string(out), fmt.Errorf("%s %s: %v: %s%s", compose[0], strings.Join(cmd.Args[1:], " "), err, out, bytes.TrimSpace(stderr.Bytes()))
			}
			return string(out), nil
		}
		// Registered before up, so a half-started project goes too.
		t.Cleanup(func() {
			if t.Failed() {
				logs, _ := run("logs", "--no-color", "--tail", "30")
				t.Logf("compose logs:\n%s", logs)
			}
			if _, err := run("down", "-v", "-t", "10"); err != nil {
				t.Logf("compose down: %v", err)
			}
		})
		if _, err := run("up", "-d", "n1", "n2", "n3"); err != nil {
			t.Fatal(err)
		}

		// On the host, as the file's comment says.
		export := documentedLine(t, "export DKV_ENDPOINTS=")
		eps := strings.ReplaceAll(strings.TrimPrefix(export, "export "), "127.0.0.1:", ip+":")
		want := strings.Split(strings.TrimPrefix(eps, "DKV_ENDPOINTS="), ",")
		slices.Sort(want)
		documentedLine(t, "dkv endpoint status")
		poll(t, "endpoint status from the host", time.Minute, func() string {
			out, err := dkv([]string{eps}, "-o", "json", "endpoint", "status")
			if why := checkThreeMembers(out, want); why != "" {
				return fmt.Sprintf("%s (%v)", why, err)
			}
			return ""
		})

		// member list shows every member's reachability as the leader
		// sees it: when a follower answers, dkv asks the leader, whose
		// advertised name does not resolve here but which is one of the
		// endpoints. First until the leader has heard from both followers,
		// asking it alone; then each of a few runs must show it, whichever
		// member answers.
		documentedLine(t, "dkv member list")
		memberList := func(env ...string) string {
			out, err := dkv(env, "-o", "json", "member", "list")
			var ml struct {
				Members []struct {
					Name         string `json:"name"`
					Reachability string `json:"reachability"`
				} `json:"members"`
			}
			if err != nil || json.Unmarshal(out, &ml) != nil || len(ml.Members) != 3 {
				return fmt.Sprintf("member list printed %s (%v)", out, err)
			}
			for _, m := range ml.Members {
				if m.Reachability != "self" && m.Reachability != "reachable" {
					return fmt.Sprintf("%s is %s: %s", m.Name, m.Reachability, out)
				}
			}
			return ""
		}
		poll(t, "the leader's member list", 10*time.Second, func() string {
			return memberList("DKV_ENDPOINTS=" + leaderEndpoint(t, dkv, eps))
		})
		for range 5 {
			if why := memberList(eps); why != "" {
				t.Fatalf("member list from the host: %s", why)
			}
		}

		// Inside the network, where the advertised names resolve: the
		// documented line, with -T as no terminal is attached here.
		line := documentedLine(t, "endpoint status --cluster")
		const prefix = "docker compose -f deploy/docker-compose.yml exec "
		if !strings.HasPrefix(line, prefix) {
			t.Fatalf("the --cluster line is %q, want it to start %q", line, prefix)
		}
		args := append([]string{"exec", "-T"}, strings.Fields(strings.TrimPrefix(line, prefix))...)
		args = append(args, "-o", "json")
		// Each member publishes its client address once it is ready,
		// which may be after the others answered.
		poll(t, "endpoint status --cluster inside the network", 30*time.Second, func() string {
			out, err := run(args...)
			if why := checkThreeMembers([]byte(out), []string{"n1:7861", "n2:7871", "n3:7881"}); why != "" {
				return fmt.Sprintf("%s (%v)", why, err)
			}
			return ""
		})

		logs, err := run("logs", "--no-color")
		if err != nil {
			t.Fatal(err)
		}
		noWarnings(t, "a compose member", logs)
	})
}
