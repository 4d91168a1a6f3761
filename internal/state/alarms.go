package state

import (
	"encoding/binary"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/dkverr"
	"github.com/dkv-io/dkv/internal/keys"
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
	m, err := readAlarms(r, 8, 0)
	if err != nil {
		return err
	}
	c, err := readAlarms(r, 9, byte(dkvpb.AlarmType_ALARM_TYPE_CORRUPT))
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

// The alarm table's records, in the replicated state so that every member
// refuses the same writes and a snapshot carries it:
//
//	s/alarm/<member id, 8 bytes BE>         -> reason   NOSPACE
//	s/alarm/<member id, 8 bytes BE><kind>   -> reason   any other kind
//
// NOSPACE keeps the older 8-byte key, so data dirs from before alarms had
// kinds read the same. The bytes are a stored format.

func alarmKey(id uint64) []byte {
	k := make([]byte, len(keys.AlarmPrefix)+8)
	copy(k, keys.AlarmPrefix)
	binary.BigEndian.PutUint64(k[len(keys.AlarmPrefix):], id)
	return k
}

func kindAlarmKey(id uint64, kind byte) []byte {
	return append(alarmKey(id), kind)
}

// setAlarm records member id's NOSPACE alarm.
func setAlarm(b *pebble.Batch, id uint64, reason string) error {
	return b.Set(alarmKey(id), []byte(reason), nil)
}

// deleteAlarm clears member id's NOSPACE alarm.
func deleteAlarm(b *pebble.Batch, id uint64) error {
	return b.Delete(alarmKey(id), nil)
}

// setKindAlarm records member id's alarm of kind (> 1; 1 is NOSPACE).
func setKindAlarm(b *pebble.Batch, id uint64, kind byte, reason string) error {
	return b.Set(kindAlarmKey(id, kind), []byte(reason), nil)
}

// deleteKindAlarm clears member id's alarm of kind.
func deleteKindAlarm(b *pebble.Batch, id uint64, kind byte) error {
	return b.Delete(kindAlarmKey(id, kind), nil)
}

// readAlarms returns the raised alarms whose keys are n bytes past the
// prefix and, for n = 9, end in kind: member id -> reason.
func readAlarms(r pebble.Reader, n int, kind byte) (map[uint64]string, error) {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: keys.AlarmPrefix, UpperBound: keys.AlarmEnd})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	p := len(keys.AlarmPrefix)
	out := map[uint64]string{}
	for it.First(); it.Valid(); it.Next() {
		if k := it.Key(); len(k) == p+n && (n == 8 || k[len(k)-1] == kind) {
			out[binary.BigEndian.Uint64(k[p:])] = string(it.Value())
		}
	}
	return out, it.Error()
}
