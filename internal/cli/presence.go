package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/recipe"
	"github.com/spf13/cobra"
)

// jsonPresenceMember is one member in `dkv presence list|watch -o json`.
type jsonPresenceMember struct {
	Type     string `json:"type,omitempty"` // watch: member (initial), join, update, leave
	Group    string `json:"group"`
	ID       string `json:"id"`
	Metadata string `json:"metadata"`
	Lease    string `json:"lease"`
	Revision int64  `json:"revision"`
}

func toJSONPresenceMember(typ string, m recipe.Member, rev int64) jsonPresenceMember {
	return jsonPresenceMember{Type: typ, Group: m.Group, ID: m.ID, Metadata: string(m.Metadata), Lease: fmt.Sprintf("%x", m.Lease), Revision: rev}
}

func (a *App) printMember(typ string, m recipe.Member, rev int64) error {
	if a.JSON() {
		return WriteJSON(a.stdout, toJSONPresenceMember(typ, m, rev))
	}
	if typ != "" {
		_, err := fmt.Fprintf(a.stdout, "%s %s %s\n", typ, m.ID, m.Metadata)
		return err
	}
	_, err := fmt.Fprintf(a.stdout, "%s %s\n", m.ID, m.Metadata)
	return err
}

func (a *App) presenceCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "presence",
		Short: "Register in, list and watch presence groups (service registry)",
		Long: `A presence group is the set of live members registered under a name
(docs/recipes.md, "Presence"). A member lives on a session lease: it leaves
when it deregisters, or --ttl after its process died.`,
	}
	cmd.AddCommand(a.presenceRegisterCmd(), a.presenceListCmd(), a.presenceWatchCmd())
	return cmd
}

func (a *App) presenceRegisterCmd() *cobra.Command {
	var ttlFlag string
	cmd := &cobra.Command{
		Use:   "register GROUP ID [METADATA]",
		Short: "Register ID in GROUP and stay registered until interrupted",
		Long: `dkv presence register GROUP ID [METADATA] registers, prints
"registered GROUP ID lease=L", and stays registered until interrupted (then
it deregisters, exit 0). If this dkv dies, the member leaves --ttl after
the last renewal. An ID registered by another live session is refused
(Conflict, exit 4). --timeout bounds connecting only.`,
		Args: Args(cobra.RangeArgs(2, 3)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			ttl, err := parseTTL("--ttl", ttlFlag)
			if err != nil {
				return err
			}
			var meta []byte
			if len(argv) == 3 {
				meta = []byte(argv[2])
			}
			sig, s, done, err := a.leaseSession(ttl)
			if err != nil {
				return err
			}
			defer done()
			r, err := recipe.Register(sig, s, argv[0], argv[1], meta)
			if err != nil {
				_ = s.Close()
				return err
			}
			fmt.Fprintf(a.stdout, "registered %s %s lease=%x\n", argv[0], argv[1], s.Lease())
			select {
			case <-sig.Done():
				ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
				defer cancel()
				_ = r.Deregister(ctx)
				return s.Close()
			case <-r.Done():
				return fmt.Errorf("%w: the session of presence %s/%s ended", client.ErrUnavailable, argv[0], argv[1])
			}
		},
	}
	cmd.Flags().StringVar(&ttlFlag, "ttl", "10s", "session TTL: how long the member outlives a dkv that died")
	return cmd
}

func (a *App) presenceListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list GROUP",
		Short: "List GROUP's members, one \"ID METADATA\" line each",
		Args:  Args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.run(func(ctx context.Context, c *client.Client) error {
				ms, rev, err := recipe.Members(ctx, c, argv[0])
				if err != nil {
					return err
				}
				for _, m := range ms {
					if err := a.printMember("", m, rev); err != nil {
						return err
					}
				}
				return nil
			})
		},
	}
}

func (a *App) presenceWatchCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "watch GROUP",
		Short: "Print GROUP's members, then each join, update and leave",
		Long: `dkv presence watch GROUP prints "member ID METADATA" for each current
member, then "join|update|leave ID METADATA" for each change, in order,
until interrupted. -o json prints one object per line. --timeout bounds
connecting only.`,
		Args: Args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			sig, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			c, err := a.connect(sig)
			if err != nil {
				return err
			}
			defer c.Close()
			mw, err := recipe.WatchMembers(sig, c, argv[0])
			if err != nil {
				if sig.Err() != nil {
					return nil
				}
				return err
			}
			defer mw.Close()
			for _, m := range mw.Initial() {
				if err := a.printMember("member", m, mw.Revision()); err != nil {
					return err
				}
			}
			for ev := range mw.Events() {
				if err := a.printMember(ev.Type.String(), ev.Member, ev.Revision); err != nil {
					return err
				}
			}
			return nil
		},
	}
}
