package auth

import (
	"strings"
	"testing"
	"time"
)

func TestTokenRoundTrip(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	now := time.Unix(1_700_000_000, 0)
	tok, err := Sign(key, "alice", 7, now.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	user, rev, err := Verify(key, tok, now)
	if err != nil || user != "alice" || rev != 7 {
		t.Fatalf("Verify = %q, %d, %v; want alice, 7, nil", user, rev, err)
	}
	if _, _, err := Verify(key, tok, now.Add(2*time.Minute)); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("expired token: err = %v", err)
	}
	if _, _, err := Verify([]byte("another key, another cluster...."), tok, now); err == nil {
		t.Fatal("token verified with the wrong key")
	}
	if _, _, err := Verify(key, tok[:len(tok)-2], now); err == nil {
		t.Fatal("truncated token verified")
	}
	if _, err := Sign(nil, "alice", 1, now); err == nil {
		t.Fatal("signed without a key")
	}
}
