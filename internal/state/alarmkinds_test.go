package state

import (
	"testing"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
)

func corruptAlarm(id uint64, on bool) *dkvpb.InternalRequest {
	return &dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Alarm{Alarm: &dkvpb.AlarmRequest{
		MemberId: id, Active: on, Reason: "KV hash differs", Alarm: dkvpb.AlarmType_ALARM_TYPE_CORRUPT,
	}}}
}

// A CORRUPT alarm is kept apart from NOSPACE: it does not stop the
// cluster's writes (only the diverged member refuses clients, in the
// server), it survives a reload, and both kinds of one member coexist.
func TestCorruptAlarmIsItsOwnKind(t *testing.T) {
	h := newHarness(t)
	h.ok(corruptAlarm(7, true))
	if r, ok := h.m.Alarms().Corrupt(7); !ok || r != "KV hash differs" || h.m.Alarms().CorruptCount() != 1 {
		t.Fatalf("CORRUPT alarm not raised: %q %v", r, ok)
	}
	if h.m.Alarms().Raised(7) || h.m.Alarms().Describe() != "" {
		t.Fatalf("a CORRUPT alarm counted as NOSPACE: %q", h.m.Alarms().Describe())
	}
	h.ok(put("a", "1", 0)) // writes go on
	h.ok(alarm(7, true))
	l := h.m.Alarms().List()
	if len(l) != 2 || l[0].GetAlarm() != dkvpb.AlarmType_ALARM_TYPE_NOSPACE || l[1].GetAlarm() != dkvpb.AlarmType_ALARM_TYPE_CORRUPT {
		t.Fatalf("List = %v, want NOSPACE then CORRUPT of member 7", l)
	}
	if o := openHarness(t, h.store); o.m.Alarms().CorruptCount() != 1 || !o.m.Alarms().Raised(7) {
		t.Fatal("alarms not loaded from the state")
	}
	h.ok(alarm(7, false))
	if _, ok := h.m.Alarms().Corrupt(7); !ok {
		t.Fatal("clearing NOSPACE cleared CORRUPT")
	}
	h.ok(corruptAlarm(7, false))
	if len(h.m.Alarms().List()) != 0 {
		t.Fatalf("alarms left: %v", h.m.Alarms().List())
	}
	// A kind this build does not know changes nothing, alike everywhere.
	h.ok(&dkvpb.InternalRequest{Request: &dkvpb.InternalRequest_Alarm{Alarm: &dkvpb.AlarmRequest{MemberId: 1, Active: true, Alarm: 99}}})
	if len(h.m.Alarms().List()) != 0 {
		t.Fatalf("an unknown kind raised %v", h.m.Alarms().List())
	}
}
