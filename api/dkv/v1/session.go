package dkvpb

import (
	"fmt"
	"strconv"
	"strings"
)

// SessionMetadata is the gRPC metadata key that carries a write's client
// session (KV.SessionOpen): "ID:SEQ:ACKED", the id in hex, SEQ the
// write's sequence number in the session (the same each time the write
// is sent), ACKED the lowest sequence whose reply the client is still
// waiting for (every reply below it arrived). Over HTTP the gateway takes
// it from the header "Dkv-Session".
const SessionMetadata = "dkv-session"

// FormatSession is the SessionMetadata value for a write.
func FormatSession(id, seq, acked uint64) string {
	b := make([]byte, 0, 48)
	b = strconv.AppendUint(b, id, 16)
	b = append(b, ':')
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, ':')
	b = strconv.AppendUint(b, acked, 10)
	return string(b)
}

// ParseSession parses a SessionMetadata value.
func ParseSession(v string) (*ClientSession, error) {
	bad := func(why string) error {
		return fmt.Errorf("%s %q: %s; want ID:SEQ:ACKED (the id in hex, not 0; 1 <= ACKED <= SEQ)", SessionMetadata, v, why)
	}
	f0, rest, ok1 := strings.Cut(v, ":")
	f1, f2, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 || strings.Contains(f2, ":") {
		return nil, bad("not three fields")
	}
	id, err := strconv.ParseUint(f0, 16, 64)
	if err != nil || id == 0 {
		return nil, bad("bad id")
	}
	seq, err1 := strconv.ParseUint(f1, 10, 64)
	acked, err2 := strconv.ParseUint(f2, 10, 64)
	if err1 != nil || err2 != nil || seq == 0 || acked == 0 || acked > seq {
		return nil, bad("bad sequence")
	}
	return &ClientSession{Id: id, Seq: seq, Acked: acked}, nil
}
