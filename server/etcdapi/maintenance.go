package etcdapi

import (
	"context"
	"crypto/sha256"
	"fmt"
	"hash"
	"io"
	"strings"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// EtcdVersion is the etcd version DKV's etcd API answers as: the etcd
// API level it serves, 3.7 (every RPC of etcd 3.7's etcdserverpb,
// RangeStream included; Downgrade answers as a cluster that cannot
// downgrade; Status carries 3.6's fields). Status reports it followed by
// DKV's own version as semver build metadata ("3.7.0+dkv.0.3.0"), which
// etcd clients accept: clientv3 and kube-apiserver parse it as semver and
// gate features on it (kube-apiserver turns RequestWatchProgress and
// consistent lists from its watch cache off for 3.5.0-3.5.12).
const EtcdVersion = "3.7.0"

// The etcd methods with no DKV method of the same meaning; authorized
// under their own names, which DKV's auth grants to root only.
const (
	methodAlarm      = "/etcdserverpb.Maintenance/Alarm"
	methodDefragment = "/etcdserverpb.Maintenance/Defragment"
	methodDowngrade  = "/etcdserverpb.Maintenance/Downgrade"
)

// maintenanceServer is etcd's Maintenance service over DKV's Cluster
// (status, hash, leader transfer) and Maintenance (snapshot) services
// and its alarm table.
type maintenanceServer struct {
	etcdserverpb.UnimplementedMaintenanceServer
	d Deps
}

// versionString is etcd's version with DKV's as build metadata.
func versionString(dkv string) string {
	meta := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '.' || r == '-' {
			return r
		}
		return '-'
	}, dkv)
	if meta == "" {
		return EtcdVersion
	}
	return EtcdVersion + "+dkv." + meta
}

func (ms *maintenanceServer) Status(ctx context.Context, _ *etcdserverpb.StatusRequest) (*etcdserverpb.StatusResponse, error) {
	req := &dkvpb.StatusRequest{}
	st, err := call(ctx, ms.d, dkvpb.Cluster_Status_FullMethodName, req, func(ctx context.Context) (*dkvpb.StatusResponse, error) {
		return ms.d.Cluster.Status(ctx, req)
	})
	if err != nil {
		return nil, toEtcdErr(err)
	}
	out := &etcdserverpb.StatusResponse{
		Header: toHeader(st.GetHeader()), Version: versionString(st.GetVersion()),
		DbSize: st.GetDbSize(), DbSizeInUse: st.GetDbSize(), Leader: st.GetLeaderId(),
		RaftIndex: st.GetRaftIndex(), RaftTerm: st.GetRaftTerm(), RaftAppliedIndex: st.GetRaftAppliedIndex(),
		IsLearner: st.GetIsLearner(),
		// etcd 3.6's fields: the quota (0: none, --quota-bytes unset),
		// and no downgrade, which DKV never has in progress. DKV's
		// storage is not etcd's bolt schema, so it has no storage
		// version to report.
		DbSizeQuota:   st.GetQuotaBytes(),
		DowngradeInfo: &etcdserverpb.DowngradeInfo{},
	}
	if ms.d.DBSizeInUse != nil && st.GetDbSize() != 0 {
		// Status's sizes are root's (a filtered reply has none).
		out.DbSizeInUse = ms.d.DBSizeInUse()
	}
	if ms.d.Alarms != nil {
		for _, a := range ms.d.Alarms() {
			out.Errors = append(out.Errors, fmt.Sprintf("memberID:%d alarm:%s", a.MemberID, a.Alarm))
		}
	}
	return out, nil
}

// HashKV hashes the keyspace at a revision with DKV's hash (64 bits,
// folded to etcd's 32): equal between DKV members at one revision, not
// comparable with an etcd member's.
func (ms *maintenanceServer) HashKV(ctx context.Context, r *etcdserverpb.HashKVRequest) (*etcdserverpb.HashKVResponse, error) {
	req := &dkvpb.HashKVRequest{Revision: r.Revision}
	h, err := call(ctx, ms.d, dkvpb.Cluster_HashKV_FullMethodName, req, func(ctx context.Context) (*dkvpb.HashKVResponse, error) {
		return ms.d.Cluster.HashKV(ctx, req)
	})
	if err != nil {
		return nil, toEtcdErr(err)
	}
	return &etcdserverpb.HashKVResponse{
		Header: toHeader(h.GetHeader()), Hash: uint32(h.GetHash()) ^ uint32(h.GetHash()>>32),
		CompactRevision: h.GetCompactRevision(), HashRevision: h.GetRevision(),
	}, nil
}

// Hash (etcd's hash of its whole bolt file) is answered with HashKV's
// hash at the current revision, the closest DKV has.
func (ms *maintenanceServer) Hash(ctx context.Context, _ *etcdserverpb.HashRequest) (*etcdserverpb.HashResponse, error) {
	h, err := ms.HashKV(ctx, &etcdserverpb.HashKVRequest{})
	if err != nil {
		return nil, err
	}
	return &etcdserverpb.HashResponse{Header: h.Header, Hash: h.Hash}, nil
}

// MoveLeader transfers leadership to the voter TargetID. Unlike etcd,
// any member accepts it (a follower forwards it to the leader).
func (ms *maintenanceServer) MoveLeader(ctx context.Context, r *etcdserverpb.MoveLeaderRequest) (*etcdserverpb.MoveLeaderResponse, error) {
	m, err := (&clusterServer{d: ms.d}).byID(ctx, r.TargetID)
	if err != nil {
		if err == rpctypes.ErrGRPCMemberNotFound {
			return nil, rpctypes.ErrGRPCBadLeaderTransferee
		}
		return nil, err
	}
	if m.GetIsLearner() {
		return nil, rpctypes.ErrGRPCBadLeaderTransferee
	}
	req := &dkvpb.LeaderTransferRequest{Name: m.GetName()}
	resp, err := call(ctx, ms.d, dkvpb.Cluster_LeaderTransfer_FullMethodName, req, func(ctx context.Context) (*dkvpb.LeaderTransferResponse, error) {
		return ms.d.Cluster.LeaderTransfer(ctx, req)
	})
	if err != nil {
		return nil, toEtcdErr(err)
	}
	return &etcdserverpb.MoveLeaderResponse{Header: toHeader(resp.GetHeader())}, nil
}

// Alarm lists, raises or clears alarms. DKV has the NOSPACE alarm; a
// member measures its own space and raises or clears its alarm itself,
// so one raised or cleared here holds until that member's next
// measurement disagrees.
func (ms *maintenanceServer) Alarm(ctx context.Context, r *etcdserverpb.AlarmRequest) (*etcdserverpb.AlarmResponse, error) {
	return unary(ctx, ms.d, methodAlarm, r, func(ctx context.Context) (*etcdserverpb.AlarmResponse, error) {
		var raised []*etcdserverpb.AlarmMember
		if ms.d.Alarms != nil {
			raised = ms.d.Alarms()
		}
		switch r.Action {
		case etcdserverpb.AlarmRequest_GET:
			return &etcdserverpb.AlarmResponse{Header: toHeader(ms.d.Header()), Alarms: raised}, nil
		case etcdserverpb.AlarmRequest_ACTIVATE, etcdserverpb.AlarmRequest_DEACTIVATE:
		default:
			return nil, status.Errorf(codes.InvalidArgument, "%salarm action %d is not GET, ACTIVATE or DEACTIVATE", etcdPrefix, r.Action)
		}
		active := r.Action == etcdserverpb.AlarmRequest_ACTIVATE
		if r.Alarm != etcdserverpb.AlarmType_NOSPACE && (active || r.Alarm != etcdserverpb.AlarmType_NONE) {
			return nil, status.Errorf(codes.InvalidArgument, "%salarm %s cannot be set through the API; DKV's members raise and clear NOSPACE themselves, and only NOSPACE is ACTIVATE/DEACTIVATE-able", etcdPrefix, r.Alarm)
		}
		if ms.d.SetAlarm == nil {
			return nil, status.Errorf(codes.Unimplemented, "%salarms cannot be changed on this server", etcdPrefix)
		}
		var was bool
		for _, a := range raised {
			if a.MemberID == r.MemberID && a.Alarm == etcdserverpb.AlarmType_NOSPACE {
				was = true
			}
		}
		out := &etcdserverpb.AlarmResponse{}
		if active != was {
			if err := ms.d.SetAlarm(ctx, r.MemberID, active); err != nil {
				return nil, err
			}
		}
		if active || was {
			// etcd answers with the alarm activated or deactivated.
			out.Alarms = []*etcdserverpb.AlarmMember{{MemberID: r.MemberID, Alarm: etcdserverpb.AlarmType_NOSPACE}}
		}
		out.Header = toHeader(ms.d.Header())
		return out, nil
	})
}

// Defragment compacts this member's database so that deleted and
// compacted-away data give their space back, with reads and writes
// going on (etcd's defragment rewrites its bolt file and blocks them).
func (ms *maintenanceServer) Defragment(ctx context.Context, r *etcdserverpb.DefragmentRequest) (*etcdserverpb.DefragmentResponse, error) {
	return unary(ctx, ms.d, methodDefragment, r, func(ctx context.Context) (*etcdserverpb.DefragmentResponse, error) {
		if ms.d.Defragment == nil {
			return nil, status.Errorf(codes.Unimplemented, "%sdefragment is not available on this server", etcdPrefix)
		}
		if err := ms.d.Defragment(ctx); err != nil {
			return nil, err
		}
		return &etcdserverpb.DefragmentResponse{Header: toHeader(ms.d.Header())}, nil
	})
}

// Snapshot streams an etcd snapshot: the member's state as a bbolt
// database in etcd's schema (Deps.EtcdSnapshot), which etcdctl and
// etcdutl snapshot status and restore read, followed, as etcd's stream
// is, by the SHA-256 of the database. It is authorized as DKV's
// Maintenance.Snapshot (root only). Without Deps.EtcdSnapshot it streams
// DKV's own snapshot (a tar of a Pebble checkpoint) the same way.
func (ms *maintenanceServer) Snapshot(r *etcdserverpb.SnapshotRequest, stream etcdserverpb.Maintenance_SnapshotServer) error {
	if err := ms.d.requireLeader(stream.Context()); err != nil {
		return err
	}
	err := ms.d.Stream(nil, stream, dkvpb.Maintenance_Snapshot_FullMethodName, func(_ any, ss grpc.ServerStream) error {
		if ms.d.EtcdSnapshot != nil {
			return ms.sendEtcd(stream)
		}
		out := &snapshotStream{ServerStream: ss, out: stream, version: EtcdVersion, sum: sha256.New()}
		if err := ms.d.Maintenance.Snapshot(&dkvpb.SnapshotRequest{}, out); err != nil {
			return err
		}
		// etcd's stream ends with the SHA-256 of what came before, and
		// etcdctl snapshot save refuses a file without it (it checks the
		// size is 32 past a 512-byte boundary, which a tar stream is on).
		// A tar reader stops at the archive's end and ignores it.
		return stream.Send(&etcdserverpb.SnapshotResponse{Header: out.hdr, Blob: out.sum.Sum(nil)})
	})
	return toEtcdErr(err)
}

// snapshotChunk is the blob size of one Snapshot message (etcd's is
// 32 KiB; larger messages mean fewer of them, well under gRPC's limit).
const snapshotChunk = 1 << 20

// sendEtcd streams the etcd snapshot database, then its SHA-256.
func (ms *maintenanceServer) sendEtcd(stream etcdserverpb.Maintenance_SnapshotServer) error {
	f, size, err := ms.d.EtcdSnapshot(stream.Context())
	if err != nil {
		return err
	}
	defer f.Close()
	if size%512 != 0 {
		// etcdctl finds the checksum by the size: the database must be a
		// whole number of 512-byte blocks, as bolt's pages are.
		return status.Errorf(codes.Internal, "%sthe snapshot database is %d bytes, not a whole number of 512-byte blocks", etcdPrefix, size)
	}
	hdr := toHeader(ms.d.Header())
	sum := sha256.New()
	buf := make([]byte, snapshotChunk)
	var sent int64
	for first := true; ; first = false {
		n, err := io.ReadFull(f, buf)
		if n > 0 || first {
			sum.Write(buf[:n])
			sent += int64(n)
			out := &etcdserverpb.SnapshotResponse{Header: hdr, Blob: buf[:n], RemainingBytes: uint64(max(size-sent, 0)) + sha256.Size}
			if first {
				out.Version = EtcdVersion // etcd 3.6 sends the storage version first
			}
			if err := stream.Send(out); err != nil {
				return err
			}
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return status.Errorf(codes.Internal, "%sread the snapshot database: %v", etcdPrefix, err)
		}
	}
	if sent != size {
		return status.Errorf(codes.Internal, "%sthe snapshot database was %d bytes, %d were read", etcdPrefix, size, sent)
	}
	return stream.Send(&etcdserverpb.SnapshotResponse{Header: hdr, Blob: sum.Sum(nil)})
}

// snapshotStream is DKV's snapshot stream sending etcd's messages.
type snapshotStream struct {
	grpc.ServerStream
	out     etcdserverpb.Maintenance_SnapshotServer
	version string
	sent    bool
	sum     hash.Hash
	hdr     *etcdserverpb.ResponseHeader
}

func (s *snapshotStream) Send(r *dkvpb.SnapshotResponse) error {
	s.hdr = toHeader(r.GetHeader())
	// Still to come: the rest of DKV's stream and the checksum.
	out := &etcdserverpb.SnapshotResponse{Header: s.hdr, Blob: r.GetBlob(), RemainingBytes: r.GetRemainingBytes() + sha256.Size}
	if !s.sent {
		out.Version = s.version // etcd 3.6 sends the storage version first
		s.sent = true
	}
	s.sum.Write(r.GetBlob())
	return s.out.Send(out)
}
