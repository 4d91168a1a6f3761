package grpcapi

import (
	"context"
	"crypto/sha256"
	"io"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"google.golang.org/grpc"
)

// maintenanceService implements dkvpb.MaintenanceServer: snapshots of
// this member's database, alarms and defragmentation.
type maintenanceService struct {
	dkvpb.UnimplementedMaintenanceServer
	a *API
}

// Snapshot streams a Pebble checkpoint of this node's database as a tar
// archive. The checkpoint is consistent (one point in time). The first
// message says what it holds, the last carries the SHA-256 of the blob.
func (m *maintenanceService) Snapshot(_ *dkvpb.SnapshotRequest, stream grpc.ServerStreamingServer[dkvpb.SnapshotResponse]) error {
	ar, err := m.a.m.Snapshot()
	if err != nil {
		return err
	}
	defer ar.Close()
	buf := make([]byte, 1<<20)
	var sent int64
	hdr := m.a.n.Header(0)
	sum := sha256.New()
	first := true
	for {
		n, err := io.ReadFull(ar, buf)
		if n > 0 {
			sent += int64(n)
			remaining := uint64(0)
			if ar.Size > sent {
				remaining = uint64(ar.Size - sent)
			}
			sum.Write(buf[:n])
			resp := &dkvpb.SnapshotResponse{Header: hdr, Blob: buf[:n], RemainingBytes: max(remaining, 1)}
			if first {
				m.describe(resp, ar)
				first = false
			}
			if serr := stream.Send(resp); serr != nil {
				return serr
			}
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			last := &dkvpb.SnapshotResponse{Header: hdr, RemainingBytes: 0, Sha256: sum.Sum(nil)}
			if first {
				m.describe(last, ar)
			}
			return stream.Send(last)
		}
		if err != nil {
			return dkverr.New(dkverr.Internal, "snapshot stream: %v", err)
		}
	}
}

func (m *maintenanceService) describe(resp *dkvpb.SnapshotResponse, ar *Archive) {
	st := m.a.m.Status()
	resp.Revision = ar.Revision
	resp.CompactRevision = ar.CompactRevision
	resp.AppliedIndex = ar.AppliedIndex
	resp.KeyCount = ar.KeyCount
	resp.MemberId = st.MemberID
	resp.MemberName = m.a.o.MemberName
	resp.ClusterId = st.ClusterID
	resp.Version = m.a.o.Version
}

// Alarm lists the raised alarms or disarms those selected (through raft,
// one proposal per alarm). A NOSPACE alarm disarmed while its member
// still measures too little space is raised again by the next
// measurement, a CORRUPT one by the next divergence check if the member
// still differs.
func (m *maintenanceService) Alarm(ctx context.Context, req *dkvpb.AlarmActionRequest) (*dkvpb.AlarmResponse, error) {
	if err := m.a.n.WaitLinearizable(ctx); err != nil {
		return nil, err
	}
	switch req.GetAction() {
	case dkvpb.AlarmActionRequest_GET:
	case dkvpb.AlarmActionRequest_DISARM:
		for _, a := range m.a.m.Alarms() {
			if req.GetMemberId() != 0 && a.GetMemberId() != req.GetMemberId() {
				continue
			}
			if req.GetAlarm() != dkvpb.AlarmType_ALARM_TYPE_NONE && a.GetAlarm() != req.GetAlarm() {
				continue
			}
			if err := m.a.m.DisarmAlarm(ctx, a); err != nil {
				return nil, err
			}
		}
	default:
		return nil, dkverr.New(dkverr.InvalidInput, "alarm action %d is not GET (0) or DISARM (1)", req.GetAction())
	}
	return &dkvpb.AlarmResponse{Header: m.a.n.Header(0), Alarms: m.a.m.Alarms()}, nil
}

// Defragment truncates this member's raft log to its applied index,
// flushes the memtable and has Pebble compact the state range and the
// raft log, which drops deleted and compacted-away data and gives the
// space back. A follower behind the truncated log is sent a snapshot. It
// is Pebble's manual compaction: it runs beside reads and writes, which
// only compete with it for the disk and CPU.
func (m *maintenanceService) Defragment(ctx context.Context, _ *dkvpb.DefragmentRequest) (*dkvpb.DefragmentResponse, error) {
	d, err := m.a.m.Defragment(ctx)
	if err != nil {
		return nil, err
	}
	return &dkvpb.DefragmentResponse{Header: m.a.n.Header(0), DbSizeBefore: d.Before, DbSizeAfter: d.After, TookMs: d.Took.Milliseconds()}, nil
}
