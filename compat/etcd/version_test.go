package etcdcompat

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/version"
)

// kubeRequestWatchProgress is kube-apiserver's decision (package
// k8s.io/apiserver/pkg/storage/feature) for one endpoint: it parses
// Status's version with version.ParseSemantic and takes RequestWatchProgress,
// and with it consistent lists served from its watch cache, to work from
// 3.4.31 on, except 3.5.0 to 3.5.12 (etcd's watch-progress bugs, fixed
// in 3.4.31 and 3.5.13). A version it cannot parse counts as unsupported.
func kubeRequestWatchProgress(v string) bool {
	ver, err := version.ParseSemantic(v)
	if err != nil {
		return false
	}
	if ver.LessThan(version.MustParseSemantic("3.4.31")) {
		return false
	}
	return !ver.AtLeast(version.MustParseSemantic("3.5.0")) || ver.AtLeast(version.MustParseSemantic("3.5.13"))
}

// TestVersionForKubernetes: the version every member reports through
// Status, and /version on its client URL, say the etcd API level it
// serves. On DKV (etcd 3.7's API, RangeStream included) kube-apiserver
// must read it as a version with RequestWatchProgress, which it did not
// while DKV said 3.5.0. Debian's etcd 3.4.23 predates the fix, and
// kube-apiserver rightly turns the feature off there.
func TestVersionForKubernetes(t *testing.T) {
	// The rule itself, on the versions that matter.
	for v, want := range map[string]bool{
		"3.4.23": false, "3.4.31": true, "3.5.0+dkv.0.2.0": false, "3.5.12": false, "3.5.13": true,
		"3.6.0": true, "3.7.0+dkv.0.2.0": true, "not a version": false,
	} {
		if got := kubeRequestWatchProgress(v); got != want {
			t.Errorf("kubeRequestWatchProgress(%q) = %v, want %v", v, got, want)
		}
	}
	c := startCluster(t, target(t))
	cli := c.newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, m := range c.members {
		st, err := cli.Status(ctx, m.ClientAddr)
		if err != nil {
			t.Fatal(err)
		}
		var vj struct {
			Server  string `json:"etcdserver"`
			Cluster string `json:"etcdcluster"`
		}
		resp, err := http.Get("http://" + m.ClientAddr + "/version")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err := json.Unmarshal(body, &vj); err != nil {
			t.Fatalf("%s: GET /version: %s: %v", m.Name, body, err)
		}
		t.Logf("%s: Status version %q, /version %s", m.Name, st.Version, body)
		switch c.kind {
		case "dkv":
			if !kubeRequestWatchProgress(st.Version) {
				t.Errorf("%s: Status version %q: kube-apiserver would turn RequestWatchProgress and consistent lists from its cache off", m.Name, st.Version)
			}
			v, err := version.ParseSemantic(st.Version)
			if err != nil || v.Major() != 3 || v.Minor() != 7 {
				t.Errorf("%s: Status version %q, want etcd 3.7's API level (%v)", m.Name, st.Version, err)
			}
			if vj.Server != "3.7.0" || vj.Cluster != "3.7.0" {
				t.Errorf("%s: /version %s, want etcdserver and etcdcluster 3.7.0", m.Name, body)
			}
		case "etcd":
			if kubeRequestWatchProgress(st.Version) || vj.Server != st.Version {
				t.Errorf("%s: Status version %q, /version %s: want Debian's etcd 3.4 (before 3.4.31) in both", m.Name, st.Version, body)
			}
		}
	}
}
