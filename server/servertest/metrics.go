package servertest

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// Metric is the value of an unlabelled metric on the member's /metrics,
// read as a monitoring system would (the member needs an HTTP address:
// Cfg.HTTPAddr). It fails the test if the metric is missing.
func (n *Node) Metric(t testing.TB, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + n.Srv.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("%s: no %s in /metrics", n.Name, name)
	return 0
}
