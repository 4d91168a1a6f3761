package recipe_test

import (
	"context"
	"testing"
	"time"

	"github.com/dkv-io/dkv/client/recipe"
)

// TestQueueInNamedStores: two stores' queues of the same name hold their
// own jobs; a claim and an ack in one never touch the other's (the
// queue's keys, claims and acks are all mapped into the store).
func TestQueueInNamedStores(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := openStore(t)
	for _, s := range []string{"a", "b"} {
		if _, err := c.CreateStore(ctx, s, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	qa, err := recipe.NewQueue(c.WithStore("a"), "jobs")
	if err != nil {
		t.Fatal(err)
	}
	qb, err := recipe.NewQueue(c.WithStore("b"), "jobs")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := qa.Enqueue(ctx, []byte("job-a")); err != nil {
		t.Fatal(err)
	}
	if _, err := qb.Enqueue(ctx, []byte("job-b")); err != nil {
		t.Fatal(err)
	}
	ja, err := qa.Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(ja.Payload) != "job-a" {
		t.Fatalf("store a's queue gave %q", ja.Payload)
	}
	if err := ja.Ack(ctx); err != nil {
		t.Fatalf("ack in a: %v", err)
	}
	jb, err := qb.Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(jb.Payload) != "job-b" {
		t.Fatalf("store b's queue gave %q", jb.Payload)
	}
	if err := jb.Ack(ctx); err != nil {
		t.Fatalf("ack in b: %v", err)
	}
}
