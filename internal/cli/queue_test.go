package cli_test

import (
	"strings"
	"testing"
)

// The queue commands carry a job from push to ack across processes: the
// CLAIM that claim prints is what ack, nack and put --lock take.
func TestCLIQueue(t *testing.T) {
	n := startNode(t, t.TempDir())
	id := strings.TrimSpace(n.ok("", "queue", "push", "mail", "hello", "--idempotency-key", "m1"))
	if got := strings.TrimSpace(n.ok("", "queue", "push", "mail", "again", "--idempotency-key", "m1")); got != id+" (duplicate)" {
		t.Fatalf("second push printed %q, want %q", got, id+" (duplicate)")
	}
	if got := n.ok("", "queue", "stats", "mail"); !strings.HasPrefix(got, "visible=1 claimed=0 scheduled=0 dead=0 paused=false") {
		t.Fatalf("stats %q", got)
	}
	lines := strings.Split(n.ok("", "queue", "claim", "mail"), "\n")
	f := strings.Fields(lines[0])
	if len(f) != 3 || f[0] != id || f[1] != "1" || lines[1] != "hello" {
		t.Fatalf("claim printed %q", lines)
	}
	claim := f[2]
	n.fails(3, "Error: NotFound:", "queue", "claim", "mail")
	n.ok("", "put", "mail-result/"+id, "sent", "--lock", claim)
	n.ok("", "queue", "nack", "mail", claim, "--error", "smtp down", "--retry-after", "0s")
	n.fails(5, "Error: Locked:", "queue", "ack", "mail", claim)
	n.fails(5, "Error: Locked:", "put", "mail-result/"+id, "late", "--lock", claim)

	lines = strings.Split(n.ok("", "queue", "claim", "mail", "--wait"), "\n")
	f = strings.Fields(lines[0])
	if len(f) != 3 || f[0] != id || f[1] != "2" {
		t.Fatalf("second claim printed %q", lines)
	}
	n.ok("", "queue", "nack", "mail", f[2], "--dead", "--error", "bounced")
	if got := n.ok("", "queue", "dead", "mail"); !strings.Contains(got, id+" dead") || !strings.Contains(got, `last_error="bounced"`) {
		t.Fatalf("dead printed %q", got)
	}
	n.ok("", "queue", "requeue", "mail", id)
	if got := n.ok("", "queue", "list", "mail"); !strings.HasPrefix(got, id+" visible priority=0 attempt=0/10") {
		t.Fatalf("list printed %q", got)
	}
	lines = strings.Split(n.ok("", "queue", "claim", "mail"), "\n")
	n.ok("", "queue", "ack", "mail", strings.Fields(lines[0])[2])
	if got := n.ok("", "queue", "stats", "mail"); !strings.HasPrefix(got, "visible=0 claimed=0 scheduled=0 dead=0") {
		t.Fatalf("stats after ack %q", got)
	}
	n.fails(2, "Error: usage: purge takes", "queue", "purge", "mail")
	n.fails(6, "Error: InvalidInput:", "queue", "push", "a/b", "x")
}
