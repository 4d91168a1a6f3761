package chaos

import (
	"context"
	"strings"
	"testing"
)

// QueueSafety finds each kind of queue anomaly in a made-up history, and
// none in a clean one.
func TestQueueSafetyFindsAnomalies(t *testing.T) {
	ev := func(kind, p string, token, call, ret int64, outcome string) QueueEvent {
		return QueueEvent{Kind: kind, Payload: p, Token: token, Call: call, Ret: ret, Outcome: outcome}
	}
	clean := []QueueEvent{
		ev("enqueue", "a", 0, 1, 2, "ok"), ev("enqueue", "b", 0, 1, 2, "ok"), ev("enqueue", "c", 0, 1, 2, "ok"),
		ev("claim", "a", 10, 0, 3, "ok"), ev("ack", "a", 10, 4, 5, "ok"),
		// b: the first claim expires, its late ack is refused, the second acks.
		ev("claim", "b", 11, 0, 3, "ok"), ev("claim", "b", 12, 0, 6, "ok"),
		ev("ack", "b", 11, 7, 8, "expired"), ev("ack", "b", 12, 9, 10, "ok"),
		// c: dead-lettered.
		{Kind: "final", Dead: []string{"c"}},
	}
	cases := map[string]struct {
		events []QueueEvent
		want   string
	}{
		"clean": {clean, ""},
		"acked twice": {append(clean[:len(clean)-1:len(clean)-1], ev("claim", "a", 13, 0, 11, "ok"), ev("ack", "a", 13, 12, 13, "ok"),
			QueueEvent{Kind: "final", Dead: []string{"c"}}), "acked 2 times"},
		"lost":           {append(clean[:len(clean)-1:len(clean)-1], QueueEvent{Kind: "final"}), "job c lost"},
		"acked and dead": {append(clean[:len(clean)-1:len(clean)-1], QueueEvent{Kind: "final", Dead: []string{"a", "c"}}), "dead-lettered"},
		"expired claim acked": {append([]QueueEvent{ev("enqueue", "x", 0, 1, 2, "ok"),
			ev("claim", "x", 20, 0, 3, "ok"), ev("claim", "x", 21, 0, 5, "ok"), ev("ack", "x", 20, 6, 7, "ok")},
			QueueEvent{Kind: "final"}), "an expired claim acked"},
		"left waiting": {append(clean[:len(clean)-1:len(clean)-1], QueueEvent{Kind: "final", Dead: []string{"c"}, Waiting: []string{"b"}}), "still waiting"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rec := NewRecorder()
			for _, e := range tc.events {
				rec.Append(QueueStream, e)
			}
			got := QueueSafety{}.Check(context.Background(), &Run{History: rec, Stats: NewStats()})
			if tc.want == "" {
				if len(got) != 0 {
					t.Fatalf("anomalies in a clean history: %v", got)
				}
				return
			}
			if len(got) == 0 || !strings.Contains(got[0].Msg, tc.want) {
				t.Fatalf("got %v, want an anomaly containing %q", got, tc.want)
			}
		})
	}
}
