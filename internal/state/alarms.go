package state

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/storage"
)

// Alarms is the replicated NOSPACE alarm table as of the applied index:
// which members measured too little space, and why. The apply goroutine
// writes it; any goroutine may read it.
type Alarms struct {
	mu     sync.Mutex
	active map[uint64]string // member id -> reason
}

func (a *Alarms) set(id uint64, reason string, on bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.active == nil {
		a.active = map[uint64]string{}
	}
	if on {
		a.active[id] = reason
	} else {
		delete(a.active, id)
	}
}

// load re-reads the table from the applied state.
func (a *Alarms) load(r pebble.Reader) error {
	m, err := storage.Alarms(r)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.active = m
	a.mu.Unlock()
	return nil
}

// Raised reports whether member id's alarm is raised.
func (a *Alarms) Raised(id uint64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.active[id]
	return ok
}

// Describe is "" without an alarm, else which members and why.
func (a *Alarms) Describe() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.active) == 0 {
		return ""
	}
	parts := make([]string, 0, len(a.active))
	for id, r := range a.active {
		parts = append(parts, fmt.Sprintf("member %x: %s", id, r))
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}

// Count is how many members' alarms are raised.
func (a *Alarms) Count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.active)
}

// GrowsData reports whether req is a write the NOSPACE alarm refuses: one
// that can add data. Deletes, compaction and lease and lock bookkeeping
// that frees or keeps space are allowed.
func GrowsData(req *dkvpb.InternalRequest) bool {
	switch r := req.Request.(type) {
	case *dkvpb.InternalRequest_Put, *dkvpb.InternalRequest_Counter,
		*dkvpb.InternalRequest_LeaseGrant, *dkvpb.InternalRequest_LockAcquire,
		*dkvpb.InternalRequest_RateLimit, *dkvpb.InternalRequest_QueueClaim:
		return true
	case *dkvpb.InternalRequest_QueueAck:
		return len(r.QueueAck.GetPuts()) > 0
	case *dkvpb.InternalRequest_QueueAckBatch:
		for _, a := range r.QueueAckBatch.GetAcks() {
			if len(a.GetPuts()) > 0 {
				return true
			}
		}
	case *dkvpb.InternalRequest_Txn:
		for _, ops := range [][]*dkvpb.RequestOp{r.Txn.GetSuccess(), r.Txn.GetFailure()} {
			for _, op := range ops {
				if op.GetRequestPut() != nil {
					return true
				}
			}
		}
	}
	return false
}

// NoSpaceError is the NoSpace refusal, why naming the members short of
// space.
func NoSpaceError(why string) *dkverr.Error {
	return dkverr.New(dkverr.NoSpace, "writes are refused until space is freed (%s); reads, deletes and compaction still work", why)
}
