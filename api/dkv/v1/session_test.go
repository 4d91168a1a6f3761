package dkvpb

import (
	"strings"
	"testing"
)

// TestSessionMetadataRoundTrip: what FormatSession writes ParseSession
// reads back, and every malformed value is refused with the expected
// form named.
func TestSessionMetadataRoundTrip(t *testing.T) {
	for _, c := range []struct{ id, seq, acked uint64 }{{1, 1, 1}, {0xdeadbeef, 10, 3}, {^uint64(0), ^uint64(0), 1}} {
		v := FormatSession(c.id, c.seq, c.acked)
		s, err := ParseSession(v)
		if err != nil {
			t.Fatalf("ParseSession(%q): %v", v, err)
		}
		if s.GetId() != c.id || s.GetSeq() != c.seq || s.GetAcked() != c.acked {
			t.Fatalf("ParseSession(%q) = %v, want %+v", v, s, c)
		}
	}
	for _, v := range []string{"", "1", "1:2", "1:2:3:4", "0:1:1", "x:1:1", "1:0:0", "1:1:2", "1:1:0", "1::1", "1:1:"} {
		_, err := ParseSession(v)
		if err == nil || !strings.Contains(err.Error(), "want ID:SEQ:ACKED") {
			t.Errorf("ParseSession(%q) = %v, want an error naming ID:SEQ:ACKED", v, err)
		}
	}
}
