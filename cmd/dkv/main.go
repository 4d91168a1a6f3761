// Command dkv is the DKV server and command-line client. See docs/cli.md.
package main

import (
	"github.com/dkv-io/dkv/internal/cli"
	"github.com/dkv-io/dkv/internal/cli/servercmd"
)

func main() { cli.Main(servercmd.Server) }
