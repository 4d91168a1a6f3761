package etcdapi

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Downgrade answers etcd's downgrade calls as an etcd cluster at
// EtcdVersion answers them when it cannot be downgraded: DKV serves one
// etcd API level, and its members have no lower level to run at.
//
//   - CANCEL: etcd's `no inflight downgrade job`, since none ever is.
//   - VALIDATE and ENABLE of a version etcd cannot parse: etcd's `wrong
//     downgrade target version format`; of a version that is not one
//     minor below the cluster's: etcd's `invalid downgrade target
//     version`, as etcd refuses it.
//   - VALIDATE and ENABLE of the one target etcd would take (3.6 from
//     3.7): `invalid downgrade target version` too, with the reason.
//
// Root only, as with etcd.
func (ms *maintenanceServer) Downgrade(ctx context.Context, r *etcdserverpb.DowngradeRequest) (*etcdserverpb.DowngradeResponse, error) {
	return unary(ctx, ms.d, methodDowngrade, r, func(ctx context.Context) (*etcdserverpb.DowngradeResponse, error) {
		switch r.Action {
		case etcdserverpb.DowngradeRequest_CANCEL:
			return nil, rpctypes.ErrGRPCNoInflightDowngrade
		case etcdserverpb.DowngradeRequest_VALIDATE, etcdserverpb.DowngradeRequest_ENABLE:
		default:
			return nil, status.Errorf(codes.InvalidArgument, "%sdowngrade action %d is not VALIDATE, ENABLE or CANCEL", etcdPrefix, r.Action)
		}
		major, minor, ok := clusterVersion(r.Version)
		if !ok {
			return nil, rpctypes.ErrGRPCWrongDowngradeVersionFormat
		}
		curMajor, curMinor, _ := clusterVersion(EtcdVersion)
		if major != curMajor || minor != curMinor-1 {
			return nil, rpctypes.ErrGRPCInvalidDowngradeTargetVersion
		}
		return nil, status.Error(codes.InvalidArgument, fmt.Sprintf(
			"%s: this is DKV, which serves etcd's API at %d.%d only and cannot run at %d.%d; "+
				"to move to etcd %d.%d, restore a snapshot into it (docs/etcd-compat.md)",
			rpctypes.ErrorDesc(rpctypes.ErrGRPCInvalidDowngradeTargetVersion), curMajor, curMinor, major, minor, major, minor))
	})
}

// clusterVersion is the major and minor number of a version as etcd
// reads a downgrade target: "X.Y.Z" (a semver, whose patch, pre-release
// and build parts it drops) or "X.Y".
func clusterVersion(v string) (major, minor int, ok bool) {
	if i := strings.IndexAny(v, "-+"); i >= 0 {
		if strings.Count(v[:i], ".") != 2 {
			return 0, 0, false // pre-release or build need a full X.Y.Z
		}
		v = v[:i]
	}
	parts := strings.Split(v, ".")
	if len(parts) != 2 && len(parts) != 3 {
		return 0, 0, false
	}
	var nums [3]int
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || p == "" || (len(p) > 1 && p[0] == '0') || strings.HasPrefix(p, "+") {
			return 0, 0, false
		}
		nums[i] = n
	}
	return nums[0], nums[1], true
}
