package server

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/testutil"
)

// TestHTTPSessionAppliesOnce: over the JSON gateway a client opens a
// session (POST /v1/kv/session) and sends a counter increment twice with
// the same Dkv-Session header, as a client that lost the
// first reply would: the second gets the first's reply and the counter
// moves once. A malformed header is 400 naming the format.
func TestHTTPSessionAppliesOnce(t *testing.T) {
	_, base, _ := startHTTPTestServer(t, Config{})
	c := &http.Client{Timeout: 10 * time.Second}
	do := func(path, session, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if session != "" {
			req.Header.Set("Dkv-Session", session)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// The node offers sessions once it has published its version, a
	// moment after it starts (501 until then).
	testutil.EventuallyNoError(t, 10*time.Second, "a session to open", func(context.Context) error {
		if code, body := do("/v1/kv/session", "", `{"id":"77","ttl_ms":"60000"}`); code != 200 {
			return fmt.Errorf("open: %d %s", code, body)
		}
		return nil
	})
	key := base64.StdEncoding.EncodeToString([]byte("n"))
	inc := fmt.Sprintf(`{"key":%q,"delta":"1"}`, key)
	hdr := dkvpb.FormatSession(77, 1, 1)
	var replies []string
	for range 2 {
		code, body := do("/v1/kv/counter", hdr, inc)
		if code != 200 {
			t.Fatalf("increment in session: %d %s", code, body)
		}
		replies = append(replies, body)
	}
	if !strings.Contains(replies[0], `"value":"1"`) || replies[0] != replies[1] {
		t.Fatalf("the same increment twice answered %s and %s; want value 1 both times", replies[0], replies[1])
	}
	if code, body := do("/v1/kv/counter", "", inc); code != 200 || !strings.Contains(body, `"value":"2"`) {
		t.Fatalf("an increment without a session after it: %d %s, want value 2 (the session's increment applied once)", code, body)
	}
	if code, body := do("/v1/kv/counter", "77:x:1", inc); code != 400 || !strings.Contains(body, "ID:SEQ:ACKED") {
		t.Fatalf("a malformed session header: %d %s, want 400 naming the format", code, body)
	}
}
