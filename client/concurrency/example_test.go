package concurrency_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/concurrency"
	"github.com/dkv-io/dkv/server/embed"
)

func openExample() (*client.Client, func()) {
	dir, err := os.MkdirTemp("", "dkv-example-")
	if err != nil {
		log.Fatal(err)
	}
	c, err := embed.Open(context.Background(), dir)
	if err != nil {
		log.Fatal(err)
	}
	return c, func() { c.Close(); os.RemoveAll(dir) }
}

// A Mutex is enforced by the store: while it is held, writes to its key
// need its handle, and a released handle opens nothing.
func ExampleMutex() {
	c, done := openExample()
	defer done()
	ctx := context.Background()
	s, err := concurrency.NewSession(ctx, c)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	m := concurrency.NewMutex(s, "invoice:101")
	if err := m.Lock(ctx); err != nil {
		log.Fatal(err)
	}
	_, err = c.Put(ctx, "invoice:101", []byte("paid by someone else"))
	fmt.Println("unguarded write:", errors.Is(err, client.ErrLocked))
	_, err = c.Put(ctx, "invoice:101", []byte("paid"), client.WithLock(m.Handle()))
	fmt.Println("guarded write:", err)

	h := m.Handle()
	if err := m.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	_, err = c.Put(ctx, "invoice:101", []byte("late"), client.WithLock(h))
	fmt.Println("write with a released handle:", errors.Is(err, client.ErrLocked))
	// Output:
	// unguarded write: true
	// guarded write: <nil>
	// write with a released handle: true
}

// An election's term is a fencing token: a deposed leader's fenced writes
// are refused by the store.
func ExampleElection() {
	c, done := openExample()
	defer done()
	ctx := context.Background()
	s1, _ := concurrency.NewSession(ctx, c)
	s2, _ := concurrency.NewSession(ctx, c)
	defer s2.Close()

	l1, err := concurrency.NewElection(s1, "billing/leader").Campaign(ctx, []byte("worker-1"))
	if err != nil {
		log.Fatal(err)
	}
	won := make(chan *concurrency.Leadership)
	go func() {
		l2, err := concurrency.NewElection(s2, "billing/leader").Campaign(ctx, []byte("worker-2"))
		if err != nil {
			log.Fatal(err)
		}
		won <- l2
	}()
	li, _ := concurrency.NewElection(s2, "billing/leader").Leader(ctx)
	fmt.Printf("leader %s\n", li.Value)

	s1.Close() // worker-1's session ends: worker-2 is elected
	l2 := <-won
	fmt.Println("larger term:", l2.Term() > l1.Term())
	_, err = c.Put(ctx, "billing/config", []byte("x"), client.WithLock(l1.Handle()))
	fmt.Println("deposed leader's write refused:", errors.Is(err, client.ErrLocked))
	// Output:
	// leader worker-1
	// larger term: true
	// deposed leader's write refused: true
}
