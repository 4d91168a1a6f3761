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

// Alarms is the replicated alarm table as of the applied index: which
// members measured too little space (NOSPACE), and which were found to
// have diverged (CORRUPT), and why. The apply goroutine writes it; any
// goroutine may read it.
type Alarms struct {
	mu      sync.Mutex
	active  map[uint64]string // NOSPACE: member id -> reason
	corrupt map[uint64]string // CORRUPT: member id -> reason
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

func (a *Alarms) setCorrupt(id uint64, reason string, on bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.corrupt == nil {
		a.corrupt = map[uint64]string{}
	}
	if on {
		a.corrupt[id] = reason
	} else {
		delete(a.corrupt, id)
	}
}

// load re-reads the table from the applied state.
func (a *Alarms) load(r pebble.Reader) error {
	m, err := storage.Alarms(r)
	if err != nil {
		return err
	}
	c, err := storage.KindAlarms(r, byte(dkvpb.AlarmType_ALARM_TYPE_CORRUPT))
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.active, a.corrupt = m, c
	a.mu.Unlock()
	return nil
}

// Corrupt reports whether member id's CORRUPT alarm is raised, and why.
func (a *Alarms) Corrupt(id uint64) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r, ok := a.corrupt[id]
	return r, ok
}

// CorruptCount is how many members' CORRUPT alarms are raised.
func (a *Alarms) CorruptCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.corrupt)
}

// List is every raised alarm, by member id then kind.
func (a *Alarms) List() []*dkvpb.AlarmMember {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []*dkvpb.AlarmMember
	for id, r := range a.active {
		out = append(out, &dkvpb.AlarmMember{MemberId: id, Alarm: dkvpb.AlarmType_ALARM_TYPE_NOSPACE, Reason: r})
	}
	for id, r := range a.corrupt {
		out = append(out, &dkvpb.AlarmMember{MemberId: id, Alarm: dkvpb.AlarmType_ALARM_TYPE_CORRUPT, Reason: r})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].MemberId != out[j].MemberId {
			return out[i].MemberId < out[j].MemberId
		}
		return out[i].Alarm < out[j].Alarm
	})
	return out
}

// Raised reports whether member id's NOSPACE alarm is raised.
func (a *Alarms) Raised(id uint64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.active[id]
	return ok
}

// Describe is "" without a NOSPACE alarm, else which members and why.
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

// Count is how many members' NOSPACE alarms are raised.
func (a *Alarms) Count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.active)
}

// NoSpaceError is the NoSpace refusal, why naming the members short of
// space.
func NoSpaceError(why string) *dkverr.Error {
	return dkverr.New(dkverr.NoSpace, "writes are refused until space is freed (%s); reads, deletes and compaction still work", why)
}

// An alarm a member measured: deterministic, since the measurement
// travels in the command.
var alarmCommand = Command{
	name: "alarm",
	apply: func(m *Machine, b *pebble.Batch, req *dkvpb.InternalRequest) Result {
		m.applyAlarm(b, req.GetAlarm())
		return Result{Revision: m.kv.Revision()}
	},
}
