package keyrange

import (
	"bytes"
	"testing"
)

func TestPrefixEnd(t *testing.T) {
	for _, c := range []struct{ p, want []byte }{
		{[]byte("s/ll/"), []byte("s/ll0")},
		{[]byte{'a', 0xff}, []byte{'b'}},
		{[]byte{0xff, 0xff}, nil},
		{nil, nil},
	} {
		if got := PrefixEnd(c.p); !bytes.Equal(got, c.want) {
			t.Errorf("PrefixEnd(%q) = %q, want %q", c.p, got, c.want)
		}
	}
}
