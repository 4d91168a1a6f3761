package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/server/embed"
)

// openExample opens an embedded store in a fresh temporary directory.
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

func ExampleClient_Put() {
	c, done := openExample()
	defer done()
	ctx := context.Background()

	if _, err := c.Put(ctx, "greeting", []byte("hello")); err != nil {
		log.Fatal(err)
	}
	kv, err := c.Get(ctx, "greeting")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s = %s (version %d)\n", kv.Key, kv.Value, kv.Version)

	// A put that must not overwrite: IfAbsent fails with ErrConflict.
	_, err = c.Put(ctx, "greeting", []byte("bye"), client.IfAbsent())
	fmt.Println(errors.Is(err, client.ErrConflict))

	_, err = c.Get(ctx, "nobody")
	fmt.Println(errors.Is(err, client.ErrNotFound))
	// Output:
	// greeting = hello (version 1)
	// true
	// true
}

func ExampleGetJSON() {
	c, done := openExample()
	defer done()
	ctx := context.Background()

	type Flag struct {
		Enabled bool
		Percent int
	}
	if _, err := client.PutJSON(ctx, c, "flags/dark-mode", Flag{Enabled: true, Percent: 25}); err != nil {
		log.Fatal(err)
	}
	flag, kv, err := client.GetJSON[Flag](ctx, c, "flags/dark-mode")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%+v version=%d\n", flag, kv.Version)
	// Output:
	// {Enabled:true Percent:25} version=1
}

// A compare-and-swap: move the balance only if nobody changed it since it
// was read.
func ExampleClient_Txn() {
	c, done := openExample()
	defer done()
	ctx := context.Background()

	if _, err := c.Put(ctx, "balance", []byte("100")); err != nil {
		log.Fatal(err)
	}
	kv, err := c.Get(ctx, "balance")
	if err != nil {
		log.Fatal(err)
	}
	res, err := c.Txn(ctx).
		If(client.ModRevision("balance").Equal(kv.ModRevision)).
		Then(client.OpPut("balance", []byte("70")), client.OpPut("audit/1", []byte("-30"))).
		Else(client.OpGet("balance")).
		Commit()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("first swap succeeded:", res.Succeeded)

	// The same swap again fails: the balance moved on. Else ran instead.
	res, err = c.Txn(ctx).
		If(client.ModRevision("balance").Equal(kv.ModRevision)).
		Then(client.OpPut("balance", []byte("40"))).
		Else(client.OpGet("balance")).
		Commit()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("second swap succeeded:", res.Succeeded)
	fmt.Printf("balance is %s\n", res.Responses[0].Get.KVs[0].Value)
	// Output:
	// first swap succeeded: true
	// second swap succeeded: false
	// balance is 70
}

func ExampleClient_Counter() {
	c, done := openExample()
	defer done()
	ctx := context.Background()

	// A bounded counter: at most 2 concurrent jobs.
	for i := 1; i <= 3; i++ {
		n, err := c.Counter(ctx, "jobs/running", 1, client.WithMax(2))
		if errors.Is(err, client.ErrConflict) {
			fmt.Printf("job %d: too many running\n", i)
			continue
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("job %d: running=%d\n", i, n)
	}
	// Output:
	// job 1: running=1
	// job 2: running=2
	// job 3: too many running
}
