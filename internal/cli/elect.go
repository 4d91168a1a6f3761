package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/concurrency"
	"github.com/spf13/cobra"
)

func (a *App) electCmd() *cobra.Command {
	var (
		listen  bool
		ttlFlag string
	)
	cmd := &cobra.Command{
		Use:   "elect NAME [VALUE]",
		Short: "Campaign for leadership of NAME, or --listen to leader changes",
		Long: `dkv elect NAME VALUE campaigns with VALUE; once elected it prints
"elected NAME term=T handle=H" (H for --lock) and holds leadership until interrupted (then resigns,
so the next candidate is elected at once). If this dkv dies, leadership
passes on --ttl after its last renewal. The term is a fencing token: it only
grows, and the leader's writes made under its handle are refused once it is
deposed (docs/locks.md). A standby waits for as long as it takes, with no
time limit (--timeout bounds connecting only).

dkv elect NAME --listen prints the current leader and each change, one line
each: "TERM VALUE"; while no one leads it says so once, on stderr.`,
		Args: Args(cobra.RangeArgs(1, 2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if listen != (len(argv) == 1) {
				return Usagef("give either NAME VALUE or NAME --listen")
			}
			ttl, err := parseTTL("--ttl", ttlFlag)
			if err != nil {
				return err
			}
			sig, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			c, err := a.connect(sig)
			if err != nil {
				return err
			}
			defer c.Close()
			name := argv[0]
			if listen {
				// Said on stderr, so stdout stays one line per leader.
				if _, err := concurrency.Leader(sig, c, name); errors.Is(err, concurrency.ErrNoLeader) {
					fmt.Fprintf(a.stderr, "no leader of %s yet; waiting for one\n", name)
				} else if err != nil && sig.Err() == nil {
					return err
				}
				for li := range concurrency.Observe(sig, c, name) {
					if a.JSON() {
						if err := WriteJSON(a.stdout, map[string]any{"name": name, "term": li.Term, "value": string(li.Value)}); err != nil {
							return err
						}
						continue
					}
					fmt.Fprintf(a.stdout, "%d %s\n", li.Term, li.Value)
				}
				return nil
			}
			s, err := concurrency.NewSession(sig, c, concurrency.WithTTL(ttl))
			if err != nil {
				return err
			}
			l, err := concurrency.NewElection(s, name).Campaign(sig, []byte(argv[1]))
			if err != nil {
				_ = s.Close()
				if sig.Err() != nil {
					return nil
				}
				return err
			}
			fmt.Fprintf(a.stdout, "elected %s term=%d handle=%s\n", name, l.Term(), l.Handle())
			select {
			case <-sig.Done():
				ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
				defer cancel()
				_ = l.Resign(ctx)
				return s.Close()
			case <-l.Done():
				_ = s.Close()
				return fmt.Errorf("%w: leadership of %s lost (term %d) at %s", client.ErrLocked, name, l.Term(), time.Now().Format(time.RFC3339))
			}
		},
	}
	cmd.Flags().BoolVar(&listen, "listen", false, "print the leader and each change instead of campaigning")
	cmd.Flags().StringVar(&ttlFlag, "ttl", "10s", "session TTL: how long leadership outlives a dkv that died")
	return cmd
}
