package state

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/mvcc"
	"github.com/dkv-io/dkv/internal/storage"
)

// ValueOnceSince is the first minor version (of major 0) whose members
// read the keyspace in mvcc.LayoutValueOnce. An older member reads live
// keys from the latest records that layout no longer writes, and would
// serve an empty keyspace; so the layout changes only once every member
// in the member table, at that point of the log, has published a
// version at least this.
const ValueOnceSince = 3

func versionReadsValueOnce(v string) bool {
	major, minor, err := ParseVersion(v)
	return err == nil && (major > 0 || minor >= ValueOnceSince)
}

// LayoutBlocker returns the first member in ms that has not published a
// version reading mvcc.LayoutValueOnce (one that published none
// included), or nil when the layout may change.
func LayoutBlocker(ms []*dkvpb.Member) *dkvpb.Member {
	for _, m := range ms {
		if !versionReadsValueOnce(m.GetVersion()) {
			return m
		}
	}
	return nil
}

// The storage layout change (layout.go of package mvcc): members'
// bookkeeping, proposed by the leader, never by a client.
var storageLayoutCommand = Command{
	name: "storage_layout",
	apply: func(m *Machine, b *pebble.Batch, req *dkvpb.InternalRequest) Result {
		if want := req.GetStorageLayout().GetLayout(); want != mvcc.LayoutValueOnce {
			return m.refused(dkverr.New(dkverr.InvalidInput, "storage layout %d: this build moves the keyspace to layout %d only", want, mvcc.LayoutValueOnce))
		}
		ms, err := Members(b)
		must(err)
		if old := LayoutBlocker(ms); old != nil {
			v := old.GetVersion()
			if v == "" {
				v = "no version yet"
			}
			return m.refused(dkverr.New(dkverr.Unavailable, "storage layout %d needs every member on dkv 0.%d or later: member %x (%s) runs %s", mvcc.LayoutValueOnce, ValueOnceSince, old.GetId(), old.GetName(), v))
		}
		changed, err := m.kv.UpgradeLayout(b)
		must(err)
		if changed {
			// Node-local, in the same batch: a build that cannot read
			// the layout refuses the data dir (storage.ErrNewerFormat)
			// instead of serving an empty keyspace.
			must(storage.RecordFormat(b, storage.FormatValueOnce))
			m.log.Info(fmt.Sprintf("the keyspace is in storage layout %d: each value is written once", mvcc.LayoutValueOnce))
		}
		return Result{Revision: m.kv.Revision()}
	},
}
