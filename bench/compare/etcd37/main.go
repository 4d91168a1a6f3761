// Command etcd37 is etcd's own server main, linked from the release this
// module's go.mod pins (go.etcd.io/etcd/server/v3 v3.7.3), so `make
// compare` can run etcd's newest release beside Debian's 3.4 without a
// prebuilt binary: the harness builds it with `go build ./etcd37` and starts
// it with the same flags as Debian's etcd. Pinned by go.sum, the build is
// the same on every machine.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
