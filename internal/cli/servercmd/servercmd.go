package servercmd

import (
	"github.com/dkv-io/dkv/internal/cli"
	"github.com/dkv-io/dkv/server"
	"github.com/spf13/cobra"
)

// Server is the server side of dkv, for cli.Main and cli.Server.Run.
var Server = cli.Server{Version: server.Version, AddCommands: addCommands}

func addCommands(a *cli.App, root *cobra.Command) {
	root.AddCommand(serveCmd(a), devClusterCmd(a))
	for _, c := range root.Commands() {
		if c.Name() == "snapshot" {
			c.AddCommand(snapshotRestoreCmd(a))
		}
	}
}
