package server

import (
	"encoding/json"
	"fmt"
	"github.com/dkv-io/dkv/internal/testutil"
	"log/slog"
	"strings"
	"testing"
	"time"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
)

// TestLogLinesHaveNoDuplicateKeys: every structured line a node writes
// names each attribute once. The node's logger carries member=NAME, so
// a line that also said member=ID (the raft leader change did) reads
// twice the same key with two meanings, and a JSON reader keeps only
// one of them.
func TestLogLinesHaveNoDuplicateKeys(t *testing.T) {
	var buf testutil.LockedBuffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, err := New(Config{Name: "n1", DataDir: t.TempDir(), TickInterval: 10 * time.Millisecond, NoSync: true, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	conn := startInProcess(t, s)
	if _, err := dkvpb.NewKVClient(conn).Put(t.Context(), &dkvpb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	out := buf.String()
	if !strings.Contains(out, "raft leader changed") {
		t.Fatalf("no leader change logged:\n%s", out)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if dup := duplicateKey(line); dup != "" {
			t.Errorf("key %q twice in %s", dup, line)
		}
	}
}

// duplicateKey is a key that appears twice in one object of the JSON
// line, or "".
func duplicateKey(line string) string {
	d := json.NewDecoder(strings.NewReader(line))
	var walk func() string
	walk = func() string {
		tok, err := d.Token()
		if err != nil {
			return ""
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for d.More() {
				k, err := d.Token()
				if err != nil {
					return ""
				}
				key := fmt.Sprint(k)
				if seen[key] {
					return key
				}
				seen[key] = true
				if dup := walk(); dup != "" {
					return dup
				}
			}
			_, _ = d.Token() // '}'
		case json.Delim('['):
			for d.More() {
				if dup := walk(); dup != "" {
					return dup
				}
			}
			_, _ = d.Token() // ']'
		}
		return ""
	}
	return walk()
}
