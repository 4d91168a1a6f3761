package cli_test

import (
	"strings"
	"testing"

	"github.com/dkv-io/dkv/internal/cli/clitest"
)

// The queue commands carry a job from push to ack across processes: the
// CLAIM that claim prints is what ack, nack and put --lock take.
func TestCLIQueue(t *testing.T) {
	n := clitest.StartServe(t, t.TempDir())
	id := strings.TrimSpace(n.OK("", "queue", "push", "mail", "hello", "--idempotency-key", "m1"))
	if got := strings.TrimSpace(n.OK("", "queue", "push", "mail", "again", "--idempotency-key", "m1")); got != id+" (duplicate)" {
		t.Fatalf("second push printed %q, want %q", got, id+" (duplicate)")
	}
	if got := n.OK("", "queue", "stats", "mail"); !strings.HasPrefix(got, "visible=1 claimed=0 scheduled=0 dead=0 paused=false") {
		t.Fatalf("stats %q", got)
	}
	lines := strings.Split(n.OK("", "queue", "claim", "mail"), "\n")
	f := strings.Fields(lines[0])
	if len(f) != 3 || f[0] != id || f[1] != "1" || lines[1] != "hello" {
		t.Fatalf("claim printed %q", lines)
	}
	claim := f[2]
	n.Fails(3, "Error: NotFound:", "queue", "claim", "mail")
	n.OK("", "put", "mail-result/"+id, "sent", "--lock", claim)
	if got := n.OK("", "queue", "nack", "mail", claim, "--error", "smtp down", "--retry-after", "0s"); got != "OK\n" {
		t.Fatalf("nack printed %q, want OK", got)
	}
	if r := n.Fails(5, "Error: Locked:", "queue", "ack", "mail", claim); !strings.Contains(r.Stderr, `queue "mail", claim `) || !strings.Contains(r.Stderr, "the claim is no longer held: it expired, or the job was acked, nacked or claimed again") {
		t.Fatalf("ack of a nacked claim said %q, want the queue, the claim and why it is not held", r.Stderr)
	}
	n.Fails(5, "Error: Locked:", "put", "mail-result/"+id, "late", "--lock", claim)

	lines = strings.Split(n.OK("", "queue", "claim", "mail", "--wait"), "\n")
	f = strings.Fields(lines[0])
	if len(f) != 3 || f[0] != id || f[1] != "2" {
		t.Fatalf("second claim printed %q", lines)
	}
	n.OK("", "queue", "nack", "mail", f[2], "--dead", "--error", "bounced")
	if got := n.OK("", "queue", "dead", "mail"); !strings.Contains(got, id+" dead") || !strings.Contains(got, `last_error="bounced"`) {
		t.Fatalf("dead printed %q", got)
	}
	n.OK("", "queue", "requeue", "mail", id)
	if got := n.OK("", "queue", "list", "mail"); !strings.HasPrefix(got, id+" visible priority=0 attempt=0/10") {
		t.Fatalf("list printed %q", got)
	}
	lines = strings.Split(n.OK("", "queue", "claim", "mail"), "\n")
	if got := n.OK("", "queue", "ack", "mail", strings.Fields(lines[0])[2]); got != "OK\n" {
		t.Fatalf("ack printed %q, want OK", got)
	}
	if got := n.OK("", "queue", "stats", "mail"); !strings.HasPrefix(got, "visible=0 claimed=0 scheduled=0 dead=0") {
		t.Fatalf("stats after ack %q", got)
	}
	n.Fails(2, "Error: usage: purge takes", "queue", "purge", "mail")
	n.Fails(6, "Error: InvalidInput:", "queue", "push", "a/b", "x")
}
