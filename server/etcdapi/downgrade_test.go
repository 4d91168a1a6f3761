package etcdapi_test

import (
	"strings"
	"testing"

	"github.com/dkv-io/dkv/server/etcdapi"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestStatusVersionIsEtcd37: Status and /version say etcd 3.7, the API
// level served (RangeStream included), with DKV's version as build
// metadata; Status carries etcd 3.6's fields: no downgrade in progress
// and the quota.
func TestStatusVersionIsEtcd37(t *testing.T) {
	n := startNode(t)
	st, err := etcdserverpb.NewMaintenanceClient(n.conn).Status(ctxT(t), &etcdserverpb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if etcdapi.EtcdVersion != "3.7.0" || !strings.HasPrefix(st.Version, "3.7.0+dkv.") {
		t.Fatalf("version %q (EtcdVersion %q), want 3.7.0+dkv.<DKV's version>", st.Version, etcdapi.EtcdVersion)
	}
	if st.DowngradeInfo == nil || st.DowngradeInfo.Enabled || st.DowngradeInfo.TargetVersion != "" {
		t.Fatalf("downgradeInfo %v, want present and not enabled", st.DowngradeInfo)
	}
}

// TestDowngradeRefused: Downgrade answers as an etcd 3.7 cluster that
// cannot be downgraded: etcd's errors for a malformed target, a target
// that is not 3.6, and CANCEL with nothing in flight; the one target
// etcd would take is refused with etcd's error and the reason.
func TestDowngradeRefused(t *testing.T) {
	n := startNode(t)
	m := etcdserverpb.NewMaintenanceClient(n.conn)
	for _, c := range []struct {
		action  etcdserverpb.DowngradeRequest_DowngradeAction
		version string
		code    codes.Code
		msg     string // the whole message, or its start when it ends in "..."
	}{
		{etcdserverpb.DowngradeRequest_CANCEL, "", codes.FailedPrecondition, "etcdserver: no inflight downgrade job"},
		{etcdserverpb.DowngradeRequest_VALIDATE, "", codes.InvalidArgument, "etcdserver: wrong downgrade target version format"},
		{etcdserverpb.DowngradeRequest_ENABLE, "three", codes.InvalidArgument, "etcdserver: wrong downgrade target version format"},
		{etcdserverpb.DowngradeRequest_VALIDATE, "3.6.0.1", codes.InvalidArgument, "etcdserver: wrong downgrade target version format"},
		{etcdserverpb.DowngradeRequest_VALIDATE, "3.5.0", codes.InvalidArgument, "etcdserver: invalid downgrade target version"},
		{etcdserverpb.DowngradeRequest_ENABLE, "3.7", codes.InvalidArgument, "etcdserver: invalid downgrade target version"},
		{etcdserverpb.DowngradeRequest_ENABLE, "4.6.0", codes.InvalidArgument, "etcdserver: invalid downgrade target version"},
		{etcdserverpb.DowngradeRequest_VALIDATE, "3.6.0", codes.InvalidArgument, "etcdserver: invalid downgrade target version: this is DKV, which serves etcd's API at 3.7 only and cannot run at 3.6..."},
		{etcdserverpb.DowngradeRequest_ENABLE, "3.6", codes.InvalidArgument, "etcdserver: invalid downgrade target version: this is DKV, which serves etcd's API at 3.7 only and cannot run at 3.6..."},
		{etcdserverpb.DowngradeRequest_ENABLE, "3.6.4-rc.0", codes.InvalidArgument, "etcdserver: invalid downgrade target version: this is DKV..."},
	} {
		_, err := m.Downgrade(ctxT(t), &etcdserverpb.DowngradeRequest{Action: c.action, Version: c.version})
		s, _ := status.FromError(err)
		want := strings.TrimSuffix(c.msg, "...")
		ok := s.Code() == c.code && (s.Message() == c.msg || strings.HasSuffix(c.msg, "...") && strings.HasPrefix(s.Message(), want))
		if err == nil || !ok {
			t.Errorf("Downgrade %s %q: %v; want %s %q", c.action, c.version, err, c.code, c.msg)
		}
	}
	// clientv3 maps etcd's own texts back to its errors.
	_, err := m.Downgrade(ctxT(t), &etcdserverpb.DowngradeRequest{Action: etcdserverpb.DowngradeRequest_CANCEL})
	if rpctypes.Error(err) != rpctypes.ErrNoInflightDowngrade {
		t.Errorf("CANCEL: %v, want rpctypes.ErrNoInflightDowngrade", err)
	}
}
