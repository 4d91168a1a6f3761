package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/testutil"
	"github.com/dkv-io/dkv/server"
	"github.com/dkv-io/dkv/server/servertest"
)

var metricRef = regexp.MustCompile(`\bdkv_[a-z0-9_]+`)

// exportedMetrics scrapes a running node's /metrics and returns every
// series name it exposes (histograms as their _bucket, _sum and _count).
func exportedMetrics(t *testing.T, httpAddr string) map[string]bool {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	names := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name := line
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
		}
		names[name] = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

// TestDeployDashboardAndAlertsUseExportedMetrics checks the Grafana
// dashboard and the Prometheus alert rules in deploy/ against a running
// node: every dkv_ metric they reference must be one it exports, so a
// renamed metric cannot leave a panel empty or an alert silent.
func TestDeployDashboardAndAlertsUseExportedMetrics(t *testing.T) {
	c := servertest.NewCluster(t, 1, server.Config{HTTPAddr: testutil.FreeAddr(t), QuotaBytes: 1 << 30})
	nd := c.Nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A request, so the per-method request series exist.
	if _, err := nd.KV.Put(ctx, &dkvpb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	exported := exportedMetrics(t, nd.Srv.HTTPAddr())

	files := []string{"../deploy/grafana/dkv-dashboard.json", "../deploy/prometheus/dkv-alerts.yml"}
	total := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		refs := map[string]bool{}
		for _, m := range metricRef.FindAllString(string(data), -1) {
			refs[m] = true
		}
		if len(refs) < 10 {
			t.Errorf("%s references only %d dkv_ metrics; the extraction is broken or the file is", f, len(refs))
		}
		var missing []string
		for m := range refs {
			if !exported[m] {
				missing = append(missing, m)
			}
		}
		sort.Strings(missing)
		for _, m := range missing {
			t.Errorf("%s references %s, which a running node does not export", filepath.Base(f), m)
		}
		total += len(refs)
	}
	// The extraction itself: a name that is not exported is caught.
	if exported["dkv_no_such_metric"] || !exported["dkv_raft_persist_seconds_bucket"] {
		t.Fatal("scrape parsing is broken")
	}
	if !t.Failed() {
		t.Logf("%d metric references in deploy/, all exported", total)
	}
}

// TestDeployDashboardIsValid checks the dashboard is Grafana JSON with
// panels that each query something, and that every alert rule has an
// expression, a severity and a summary.
func TestDeployDashboardIsValid(t *testing.T) {
	data, err := os.ReadFile("../deploy/grafana/dkv-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("dashboard is not JSON: %v", err)
	}
	if dash.Title == "" || len(dash.Panels) == 0 {
		t.Fatal("dashboard has no title or no panels")
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if strings.Count(tg.Expr, "(") != strings.Count(tg.Expr, ")") {
				t.Errorf("panel %q: unbalanced parentheses in %s", p.Title, tg.Expr)
			}
		}
	}
	rules, err := os.ReadFile("../deploy/prometheus/dkv-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	// One rule is the lines from "- alert:" to the next.
	blocks := strings.Split(string(rules), "- alert:")[1:]
	if len(blocks) < 8 {
		t.Fatalf("%d alert rules, want the leader, proposal, fsync, apply, quota, watch and alarm ones", len(blocks))
	}
	for _, b := range blocks {
		name := strings.TrimSpace(strings.SplitN(b, "\n", 2)[0])
		for _, want := range []string{"expr:", "severity:", "summary:"} {
			if !strings.Contains(b, want) {
				t.Errorf("alert %s has no %s", name, want)
			}
		}
		for _, line := range strings.Split(b, "\n") {
			if e, ok := strings.CutPrefix(strings.TrimSpace(line), "expr:"); ok && strings.Count(e, "(") != strings.Count(e, ")") {
				t.Errorf("alert %s: unbalanced parentheses in %s", name, e)
			}
		}
	}
}

// TestDeployComposeNeedsClusterToken: the compose
// file's members prove a peer secret the operator sets; compose refuses
// to start without it, and the file holding it is not committed.
func TestDeployComposeNeedsClusterToken(t *testing.T) {
	data, err := os.ReadFile("../deploy/docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	_, services, ok := strings.Cut(string(data), "\nservices:\n")
	if !ok {
		t.Fatal("no services: section in deploy/docker-compose.yml")
	}
	services, _, _ = strings.Cut(services, "\nnetworks:")
	svc := regexp.MustCompile(`(?m)^  ([a-z0-9]+):$`)
	heads := svc.FindAllStringSubmatchIndex(services, -1)
	if len(heads) != 3 {
		t.Fatalf("%d services in deploy/docker-compose.yml, want 3", len(heads))
	}
	for i, h := range heads {
		end := len(services)
		if i+1 < len(heads) {
			end = heads[i+1][0]
		}
		name, body := services[h[2]:h[3]], services[h[1]:end]
		if !strings.Contains(body, `--initial-cluster-token, "${DKV_CLUSTER_TOKEN:?`) {
			t.Errorf("service %s starts without --initial-cluster-token from a required DKV_CLUSTER_TOKEN:\n%s", name, body)
		}
		if strings.Contains(body, "--insecure-peer") {
			t.Errorf("service %s runs with --insecure-peer", name)
		}
	}
	ignore, err := os.ReadFile("../.gitignore")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains("\n"+string(ignore), "\n/deploy/.env\n") {
		t.Error("deploy/.env (which holds DKV_CLUSTER_TOKEN) is not in .gitignore")
	}
}
