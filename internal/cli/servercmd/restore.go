package servercmd

import (
	"fmt"

	"github.com/dkv-io/dkv/internal/backup/restore"
	"github.com/dkv-io/dkv/internal/cli"
	"github.com/spf13/cobra"
)

// snapshotRestoreCmd is 'dkv snapshot restore': it builds a data dir with
// Pebble, so it is here and not beside snapshot save and status.
func snapshotRestoreCmd(a *cli.App) *cobra.Command {
	var ro restore.RestoreOptions
	cmd := &cobra.Command{
		Use:   "restore FILE --data-dir DIR --name NAME --initial-cluster n1=PEER,n2=PEER,...",
		Short: "Build a new member's data dir from a backup; then start it with dkv serve",
		Long: `Build the data dir of member NAME of a new cluster from the backup FILE:
the backup's keys, history, revision, leases, locks and users; the
membership of --initial-cluster; a new cluster id (the same for every
member restored from FILE with the same --initial-cluster and
--initial-cluster-token). Run it once per member, each with its own
--name and --data-dir and the same other flags, then start each with
'dkv serve' and the same --name, --data-dir, --initial-cluster (and
token). FILE is verified first; a damaged file is refused (exit 11), and
so is a --data-dir that exists and is not empty.`,
		Args: cli.Args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if ro.DataDir == "" || ro.Name == "" || ro.InitialCluster == "" {
				return cli.Usagef("snapshot restore needs --data-dir, --name and --initial-cluster")
			}
			meta, err := restore.Restore(argv[0], ro)
			if err != nil {
				return err
			}
			if a.JSON() {
				return cli.WriteJSON(a.Stdout(), map[string]any{"data_dir": ro.DataDir, "name": ro.Name, "cluster_id": meta.ClusterID,
					"revision": meta.Revision, "key_count": meta.KeyCount})
			}
			tok := ""
			if ro.Token != "" {
				tok = " --initial-cluster-token ..."
			}
			_, err = fmt.Fprintf(a.Stdout(), "restored revision %d (%d keys) into %s as member %s of new cluster %s\nstart it with: dkv serve --name %s --data-dir %s --initial-cluster %s%s (and its addresses)\n",
				meta.Revision, meta.KeyCount, ro.DataDir, ro.Name, meta.ClusterID, ro.Name, ro.DataDir, ro.InitialCluster, tok)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&ro.DataDir, "data-dir", "", "the new member's data dir (must not exist, or be empty)")
	f.StringVar(&ro.Name, "name", "", "the new member's name, as dkv serve --name")
	f.StringVar(&ro.InitialCluster, "initial-cluster", "", "name=peerAddr,... of the new cluster, as dkv serve --initial-cluster")
	f.StringVar(&ro.Token, "initial-cluster-token", "", "the new cluster's --initial-cluster-token, if it will have one")
	return cmd
}
