package server

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
)

// TestQueueClaimHTTP: the gateway serves /v1/queue/claim and
// /v1/queue/ack: a claim gets the job and its lock, marked; the ack ends
// it; a stale handle is refused as LOCKED; a second consumer finds nothing while the
// job is claimed; bad input is 400 naming the limit.
func TestQueueClaimHTTP(t *testing.T) {
	_, base, conn := startHTTPTestServer(t, Config{})
	job := "dkv.queue/q/j/7fffffff" + strings.Repeat("0", 16+24)
	putKey(t, dkvpb.NewKVClient(conn), job, `{"id":"x","max_attempts":3}`)
	body := `{"queue_prefix":"ZGt2LnF1ZXVlL3Ev","owner":"me","ttl_ms":30000,"mark":true}`
	code, out := post(t, base+"/v1/queue/claim", strings.NewReader(body))
	if code != 200 || !strings.Contains(out, `"found":true`) || !strings.Contains(out, `"marked":true`) || !strings.Contains(out, `"token":"`) {
		t.Fatalf("first claim: %d %s", code, out)
	}
	var claim struct {
		Handle json.RawMessage `json:"handle"`
	}
	if err := json.Unmarshal([]byte(out), &claim); err != nil {
		t.Fatal(err)
	}
	ack := `{"handle":` + string(claim.Handle) + `,"marker_key":"` + base64.StdEncoding.EncodeToString([]byte("dkv.queue/q/c/7fffffff"+strings.Repeat("0", 40))) + `"}`
	if code, out := post(t, base+"/v1/queue/ack", strings.NewReader(ack)); code != 200 || strings.Contains(out, `"already":true`) {
		t.Fatalf("ack: %d %s", code, out)
	}
	// The job is gone and the claim ended: a fresh claim finds nothing,
	// and an ack with a wrong token is refused as LOCKED.
	bad := strings.Replace(ack, `"token":"`, `"token":"9`, 1)
	if code, out := post(t, base+"/v1/queue/ack", strings.NewReader(bad)); code == 200 || !strings.Contains(out, `"LOCKED"`) {
		t.Fatalf("ack with a stale handle: %d %s", code, out)
	}
	putKey(t, dkvpb.NewKVClient(conn), job, `{"id":"x","max_attempts":3}`)
	code, _ = post(t, base+"/v1/queue/claim", strings.NewReader(body))
	if code != 200 {
		t.Fatalf("reclaim: %d", code)
	}
	code, out = post(t, base+"/v1/queue/claim", strings.NewReader(strings.Replace(body, `"me"`, `"other"`, 1)))
	if code != 200 || strings.Contains(out, `"found":true`) {
		t.Fatalf("second claim (the job is locked): %d %s", code, out)
	}
	code, out = post(t, base+"/v1/queue/claim", strings.NewReader(`{"queue_prefix":"ZGt2LnF1ZXVlL3Ev","owner":"me","ttl_ms":10}`))
	if code != 400 || !strings.Contains(out, "ttl_ms is 10ms") {
		t.Fatalf("ttl 10 ms: %d %s", code, out)
	}
}
