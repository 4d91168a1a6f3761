package servertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/internal/testutil"
)

// WaitSessions waits until every member c reaches has published its
// version: from then on the cluster offers client sessions (a moment
// after it starts it offers none, and writes go without one).
func WaitSessions(t testing.TB, c *client.Client) {
	t.Helper()
	testutil.EventuallyNoError(t, 30*time.Second, "every member to publish its version", func(ctx context.Context) error {
		ml, err := c.MemberList(ctx)
		if err != nil {
			return err
		}
		for _, m := range ml.GetMembers() {
			if m.GetVersion() == "" {
				return fmt.Errorf("member %s has published no version", m.GetName())
			}
		}
		return nil
	})
}
