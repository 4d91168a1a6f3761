package server

import (
	"strings"
	"testing"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
)

// TestQueueClaimHTTP: the gateway serves /v1/queue/claim: the first claim
// gets the job and its lock, marked; the second finds nothing visible;
// bad input is 400 naming the limit.
func TestQueueClaimHTTP(t *testing.T) {
	_, base, conn := startHTTPTestServer(t, Config{})
	job := "dkv.queue/q/j/7fffffff" + strings.Repeat("0", 16+24)
	putKey(t, dkvpb.NewKVClient(conn), job, `{"id":"x","max_attempts":3}`)
	body := `{"queue_prefix":"ZGt2LnF1ZXVlL3Ev","owner":"me","ttl_ms":30000,"mark":true}`
	code, out := post(t, base+"/v1/queue/claim", strings.NewReader(body))
	if code != 200 || !strings.Contains(out, `"found":true`) || !strings.Contains(out, `"marked":true`) || !strings.Contains(out, `"token":"`) {
		t.Fatalf("first claim: %d %s", code, out)
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
