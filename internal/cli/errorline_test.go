package cli

import (
	"context"
	"fmt"
	"testing"

	"github.com/dkv-io/dkv/client"
)

// errorLine names the kind once, however the error was built.
func TestErrorLineSaysItsKindOnce(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("%w: lock %q is held", client.ErrLocked, "k"), `Error: Locked: lock "k" is held`},
		{fmt.Errorf("%w: leadership of %s lost", client.ErrLocked, "e"), `Error: Locked: leadership of e lost`},
		{&client.Error{Kind: client.ErrNotFound, Msg: `key "x" not found`}, `Error: NotFound: key "x" not found`},
		{&client.Error{Kind: client.ErrCompacted, Msg: "revision 1 has been compacted"}, `Error: Compacted: revision 1 has been compacted`},
		{context.DeadlineExceeded, "Error: Unavailable: context deadline exceeded"},
	} {
		if got := errorLine(tc.err); got != tc.want {
			t.Errorf("errorLine(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
