package storage

import (
	"encoding/binary"

	"github.com/cockroachdb/pebble/v2"
	"github.com/dkv-io/dkv/internal/keys"
)

// Alarms other than NOSPACE: "s/alarm/<member id, 8 bytes BE><kind>" ->
// reason. NOSPACE keeps its older 8-byte key (Alarms), so data dirs from
// before alarms had kinds read the same.

func kindAlarmKey(id uint64, kind byte) []byte {
	k := make([]byte, len(alarmPrefix)+9)
	copy(k, alarmPrefix)
	binary.BigEndian.PutUint64(k[len(alarmPrefix):], id)
	k[len(k)-1] = kind
	return k
}

// SetKindAlarm records member id's alarm of kind (> 1; 1 is NOSPACE).
func SetKindAlarm(b *pebble.Batch, id uint64, kind byte, reason string) error {
	return b.Set(kindAlarmKey(id, kind), []byte(reason), nil)
}

// DeleteKindAlarm clears member id's alarm of kind.
func DeleteKindAlarm(b *pebble.Batch, id uint64, kind byte) error {
	return b.Delete(kindAlarmKey(id, kind), nil)
}

// KindAlarms returns the raised alarms of kind: member id -> reason.
func KindAlarms(r pebble.Reader, kind byte) (map[uint64]string, error) {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: alarmPrefix, UpperBound: keys.AlarmEnd})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	out := map[uint64]string{}
	for it.First(); it.Valid(); it.Next() {
		if k := it.Key(); len(k) == len(alarmPrefix)+9 && k[len(k)-1] == kind {
			out[binary.BigEndian.Uint64(k[len(alarmPrefix):])] = string(it.Value())
		}
	}
	return out, it.Error()
}
