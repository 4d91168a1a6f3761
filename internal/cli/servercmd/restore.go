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
	var fromEtcd string
	cmd := &cobra.Command{
		Use:   "restore {FILE | --from-etcd ETCDFILE} --data-dir DIR --name NAME --initial-cluster n1=PEER,n2=PEER,...",
		Short: "Build a new member's data dir from a backup; then start it with dkv serve",
		Long: `Build the data dir of member NAME of a new cluster from the backup FILE:
the backup's keys, history, revision, leases, locks and users; the
membership of --initial-cluster; a new cluster id (the same for every
member restored from FILE with the same --initial-cluster and
--initial-cluster-token). Run it once per member, each with its own
--name and --data-dir and the same other flags, then start each with
'dkv serve' and the same --name, --data-dir, --initial-cluster (and
token). FILE is verified first; a damaged file is refused (exit 11), and
so is a --data-dir that exists and is not empty.

With --from-etcd, ETCDFILE is an etcd snapshot ('etcdctl snapshot save'
of etcd or of DKV, or an etcd member's member/snap/db) and the data dir
gets its keys with their revisions, create revisions, versions and the
history after its compaction, its compact revision and its leases,
keys attached; not its users and roles. Its SHA-256 is checked when it
has one (exit 11 on a mismatch).`,
		Args: cli.Args(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if ro.DataDir == "" || ro.Name == "" || ro.InitialCluster == "" {
				return cli.Usagef("snapshot restore needs --data-dir, --name and --initial-cluster")
			}
			if (fromEtcd == "") == (len(argv) == 0) {
				return cli.Usagef("snapshot restore needs one file: a DKV backup FILE, or an etcd snapshot with --from-etcd ETCDFILE")
			}
			if fromEtcd != "" {
				return restoreEtcd(a, fromEtcd, ro)
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
	f.StringVar(&fromEtcd, "from-etcd", "", "restore from this etcd snapshot file instead of a DKV backup")
	return cmd
}

// restoreEtcd is 'dkv snapshot restore --from-etcd'.
func restoreEtcd(a *cli.App, path string, ro restore.RestoreOptions) error {
	info, cid, err := restore.RestoreEtcd(path, ro)
	if err != nil {
		return err
	}
	if a.JSON() {
		return cli.WriteJSON(a.Stdout(), map[string]any{"data_dir": ro.DataDir, "name": ro.Name, "cluster_id": cid,
			"revision": info.Revision, "compact_revision": info.CompactRevision, "key_count": info.Keys,
			"versions": info.Versions, "leases": info.Leases, "checksum": info.Checksum})
	}
	w := a.Stdout()
	fmt.Fprintf(w, "restored etcd snapshot at revision %d (%d keys, %d versions from compact revision %d, %d leases) into %s as member %s of new cluster %s\n",
		info.Revision, info.Keys, info.Versions, info.CompactRevision, info.Leases, ro.DataDir, ro.Name, cid)
	if !info.Checksum {
		fmt.Fprintf(w, "note: %s carries no SHA-256 (a copied member database, not 'etcdctl snapshot save' output), so only its structure was checked\n", path)
	}
	if info.AuthEnabled {
		fmt.Fprintln(w, "note: the etcd cluster had auth enabled; users and roles are not restored: create them with dkv user/role (docs/security.md)")
	}
	if info.Unleased > 0 {
		fmt.Fprintf(w, "note: %d keys name a lease the snapshot does not hold; they keep the id and never expire\n", info.Unleased)
	}
	if info.ClampedLeases > 0 {
		fmt.Fprintf(w, "note: %d leases had a TTL outside DKV's 1 s .. 1 year and were given the nearest bound\n", info.ClampedLeases)
	}
	tok := ""
	if ro.Token != "" {
		tok = " --initial-cluster-token ..."
	}
	_, err = fmt.Fprintf(w, "start it with: dkv serve --name %s --data-dir %s --initial-cluster %s%s (and its addresses)\n", ro.Name, ro.DataDir, ro.InitialCluster, tok)
	return err
}
