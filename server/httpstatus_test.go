package server

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// The JSON gateway answers a refused write with the same HTTP status as
// the plain /v1/keys/ endpoint: 409 for a failed condition, 423 for a
// locked key. gRPC's default mapping gave both 400 (FailedPrecondition),
// which tells a client its request was malformed and not worth retrying
// with a fresh version or the lock's handle.
func TestHTTPGatewayStatusOfRefusedWrites(t *testing.T) {
	_, base, _ := startHTTPTestServer(t, Config{})
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

	put := fmt.Sprintf(`{"key":%q,"value":%q,"if_absent":true}`, b64("k"), b64("v"))
	if code, msg := post(t, base+"/v1/kv/put", strings.NewReader(put)); code != http.StatusOK {
		t.Fatalf("first if-absent put: %d %s", code, msg)
	}
	if code, msg := post(t, base+"/v1/kv/put", strings.NewReader(put)); code != http.StatusConflict || !strings.Contains(msg, "CONFLICT") {
		t.Errorf("second if-absent put: %d %s, want 409 CONFLICT", code, msg)
	}

	if code, msg := post(t, base+"/v1/lock/acquire", strings.NewReader(fmt.Sprintf(`{"key":%q,"ttl_ms":60000}`, b64("held")))); code != http.StatusOK {
		t.Fatalf("lock acquire: %d %s", code, msg)
	}
	code, msg := post(t, base+"/v1/kv/put", strings.NewReader(fmt.Sprintf(`{"key":%q,"value":%q}`, b64("held"), b64("x"))))
	if code != http.StatusLocked || !strings.Contains(msg, "LOCKED") {
		t.Errorf("put to a locked key without its handle: %d %s, want 423 LOCKED", code, msg)
	}
	if code, msg := post(t, base+"/v1/kv/put", strings.NewReader(`{"key":""}`)); code != http.StatusBadRequest {
		t.Errorf("put with an empty key: %d %s, want 400", code, msg)
	}
}
