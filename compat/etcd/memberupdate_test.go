package etcdcompat

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dkv-io/dkv/internal/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestMemberUpdateMovesAFollower: `member update` moves a follower of a
// three-member cluster to another peer address; restarted there with its
// data dir, it rejoins under the same id, a write made after the move
// reaches it, and etcdctl member list shows the new peer URL. etcd does
// all of this; so must the target.
func TestMemberUpdateMovesAFollower(t *testing.T) {
	c := startCluster(t, target(t))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cli := c.newClient(t)
	leader, err := c.leader(ctx, cli)
	if err != nil {
		t.Fatal(err)
	}
	var f *member
	for _, m := range c.members {
		if m != leader {
			f = m
			break
		}
	}
	newPeer := testutil.FreeAddr(t)
	if _, err := cli.MemberUpdate(ctx, f.memberID, []string{"http://" + newPeer}); err != nil {
		ml, lerr := cli.MemberList(ctx)
		t.Fatalf("member update %s to http://%s: %v\nmember list now: %v %v%s", f.Name, newPeer, err, ml, lerr, c.logs())
	}
	c.restartAt(t, f, newPeer)

	lc := c.newClientAt(t, leader)
	fc := c.newClientAt(t, f)
	testutil.EventuallyNoError(t, 30*time.Second, "the moved member to answer under its id", func(ctx context.Context) error {
		st, err := fc.Status(ctx, f.ClientAddr)
		if err != nil {
			return err
		}
		if st.Header.MemberId != f.memberID {
			return fmt.Errorf("member id %x, want %x", st.Header.MemberId, f.memberID)
		}
		return nil
	})
	if _, err := lc.Put(ctx, "after-move", "v"); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyNoError(t, 30*time.Second, "the write to replicate to the moved member", func(ctx context.Context) error {
		r, err := fc.Get(ctx, "after-move", clientv3.WithSerializable())
		if err != nil {
			return err
		}
		if len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "v" {
			return errNotYet
		}
		return nil
	})

	want := strconv.FormatUint(f.memberID, 16) + ", started, " + f.Name + ", http://" + newPeer + ", http://" + f.ClientAddr + ", false"
	testutil.EventuallyNoError(t, 20*time.Second, "etcdctl member list to show the new peer URL", func(ctx context.Context) error {
		cmd := exec.CommandContext(ctx, *etcdctlBin, "--endpoints="+strings.Join(c.endpoints(), ","), "member", "list")
		cmd.Env = append(os.Environ(), "ETCDCTL_API=3")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if line == want {
				return nil
			}
		}
		return fmt.Errorf("no line %q in:\n%s", want, out)
	})
}
