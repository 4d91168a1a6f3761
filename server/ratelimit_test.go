package server

import (
	"strings"
	"testing"
)

// TestRateLimitHTTP: the gateway serves /v1/ratelimit/allow with
// redis-cell's fields, and bad input is 400 naming the limit.
func TestRateLimitHTTP(t *testing.T) {
	_, base, _ := startHTTPTestServer(t, Config{})
	body := `{"key":"YXBp","limit":1,"period_ms":3600000,"burst":1,"n":1}`
	code, out := post(t, base+"/v1/ratelimit/allow", strings.NewReader(body))
	if code != 200 || !strings.Contains(out, `"allowed":true`) || !strings.Contains(out, `"reset_after_ms":"3600000"`) {
		t.Fatalf("first decision: %d %s", code, out)
	}
	code, out = post(t, base+"/v1/ratelimit/allow", strings.NewReader(body))
	if code != 200 || strings.Contains(out, `"allowed":true`) || !strings.Contains(out, `"retry_after_ms":"`) {
		t.Fatalf("second decision (refused): %d %s", code, out)
	}
	code, out = post(t, base+"/v1/ratelimit/allow", strings.NewReader(`{"key":"YXBp","limit":0,"period_ms":1000,"burst":1,"n":1}`))
	if code != 400 || !strings.Contains(out, "limit is 0") {
		t.Fatalf("rate 0: %d %s", code, out)
	}
}
