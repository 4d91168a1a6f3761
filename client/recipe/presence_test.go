package recipe_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/recipe"
)

func memberIDs(ms []recipe.Member) string {
	s := ""
	for _, m := range ms {
		s += fmt.Sprintf("%s=%s ", m.ID, m.Metadata)
	}
	return s
}

func nextMemberEvent(t *testing.T, mw *recipe.MemberWatch) string {
	t.Helper()
	select {
	case ev, ok := <-mw.Events():
		if !ok {
			t.Fatal("member events closed")
		}
		return fmt.Sprintf("%s %s=%s", ev.Type, ev.Member.ID, ev.Member.Metadata)
	case <-time.After(20 * time.Second):
		t.Fatal("no member event in 20s")
	}
	return ""
}

// TestPresenceRegisterWatch: Members and WatchMembers see the current
// members, then joins, updates and leaves (by Deregister and by the
// session ending) in order; an id held by another session is refused.
func TestPresenceRegisterWatch(t *testing.T) {
	c := syncTestNode(t)
	ctx := syncTestCtx(t)
	s1, s2 := syncTestSession(t, c), syncTestSession(t, c)
	if _, err := recipe.Register(ctx, s1, "web", "a", []byte("10.0.0.1")); err != nil {
		t.Fatal(err)
	}
	mw, err := recipe.WatchMembers(ctx, c, "web")
	if err != nil {
		t.Fatal(err)
	}
	defer mw.Close()
	if got := memberIDs(mw.Initial()); got != "a=10.0.0.1 " {
		t.Fatalf("initial members %q", got)
	}
	rb, err := recipe.Register(ctx, s2, "web", "b", []byte("10.0.0.2"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := recipe.Register(ctx, s2, "web", "a", []byte("stolen")); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("registering a's id from another session: %v, want ErrConflict", err)
	}
	if err := rb.Update(ctx, []byte("10.0.0.3")); err != nil {
		t.Fatal(err)
	}
	if _, err := recipe.Register(ctx, s1, "other", "x", nil); err != nil { // another group: not seen
		t.Fatal(err)
	}
	ms, _, err := recipe.Members(ctx, c, "web")
	if err != nil || memberIDs(ms) != "a=10.0.0.1 b=10.0.0.3 " {
		t.Fatalf("Members = %q, %v", memberIDs(ms), err)
	}
	if err := rb.Deregister(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s1.Close(); err != nil { // a's session ends: a leaves
		t.Fatal(err)
	}
	for _, want := range []string{"join b=10.0.0.2", "update b=10.0.0.3", "leave b=10.0.0.3", "leave a=10.0.0.1"} {
		if got := nextMemberEvent(t, mw); got != want {
			t.Fatalf("event %q, want %q", got, want)
		}
	}
	if ms := mw.Members(); len(ms) != 0 {
		t.Fatalf("watch still sees %q", memberIDs(ms))
	}
	if _, err := recipe.Register(ctx, s2, "a/b", "x", nil); !errors.Is(err, client.ErrInvalidInput) {
		t.Fatalf("group with '/': %v, want ErrInvalidInput", err)
	}
}
