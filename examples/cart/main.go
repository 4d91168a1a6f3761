// Command cart runs two instances of a small web shop behind a
// round-robin proxy, with the shopping carts kept in DKV through the
// session store recipe: whichever instance answers, the cart is the same,
// an instance replaced by a fresh one loses nothing, and 100 concurrent
// adds to one cart across both instances lose none. See README.md.
package main

import (
	"context"
	"os"

	"github.com/dkv-io/dkv/examples/internal/exenv"
)

func main() {
	exenv.Main(func(ctx context.Context, env *exenv.Env) error {
		_, err := Run(ctx, env, Config{
			Prefix: "examples/cart/" + env.Run + "/", ConcurrentAdds: 100,
			Log: exenv.NewLog(os.Stdout),
		})
		return err
	})
}
