package cli

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/dkv-io/dkv/client/recipe"
	"github.com/spf13/cobra"
)

// rwlockCmd is `dkv rwlock read|write NAME -- COMMAND [ARGS...]`: run a
// command while holding NAME for reading (shared) or writing (alone).
func (a *App) rwlockCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rwlock read|write NAME [--ttl 10s] -- COMMAND [ARGS...]",
		Short: "Run a command while holding a read-write lock (readers share it, a writer has it alone, FIFO)",
		Long: `'dkv rwlock read NAME -- COMMAND' waits until NAME is held for reading
(shared with other readers), 'dkv rwlock write NAME -- COMMAND' until it is
held for writing (alone); then it runs COMMAND with the holder's fencing
token in DKV_LOCK_TOKEN and the mode in DKV_RWLOCK_MODE. Waiters take turns
first come first served: a reader that arrives after a waiting writer waits
behind it, so readers cannot starve a writer. The hold lives on a lease
renewed while COMMAND runs and is released when it ends; dkv exits with
COMMAND's exit code. If the hold is lost (the lease could not be renewed
within --ttl), COMMAND gets SIGTERM and dkv exits with 5 (Locked). The wait
has no time limit (--timeout bounds connecting only). See docs/recipes.md,
"Read-write lock".`,
		Args: Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return Usagef("rwlock needs a subcommand: read, write")
		},
	}
	mode := func(m string) *cobra.Command {
		var ttlFlag string
		sub := &cobra.Command{
			Use:     m + " NAME [--ttl 10s] -- COMMAND [ARGS...]",
			Short:   "Run COMMAND holding NAME for " + map[string]string{"read": "reading (shared)", "write": "writing (alone)"}[m],
			Example: "  dkv rwlock " + m + " config -- ./" + m + "-config",
			Args:    Args(cobra.ArbitraryArgs),
			RunE: func(cmd *cobra.Command, argv []string) error {
				if cmd.ArgsLenAtDash() != 1 || len(argv) < 2 {
					return Usagef("rwlock %s needs NAME -- COMMAND", m)
				}
				ttl, err := parseTTL("--ttl", ttlFlag)
				if err != nil {
					return err
				}
				return a.rwlockRun(m, argv[0], ttl, argv[1], argv[2:])
			},
		}
		sub.Flags().StringVar(&ttlFlag, "ttl", "10s", "lease TTL: how long the hold outlives a dkv that stops renewing it")
		return sub
	}
	cmd.AddCommand(mode("read"), mode("write"))
	return cmd
}

func (a *App) rwlockRun(mode, name string, ttl time.Duration, prog string, cargs []string) error {
	sig, s, done, err := a.leaseSession(ttl)
	if err != nil {
		return err
	}
	defer done()
	defer s.Close() // revokes the lease: the hold goes with it
	m, err := recipe.NewRWMutex(s, name)
	if err != nil {
		return err
	}
	lock := m.Lock
	if mode == "read" {
		lock = m.RLock
	}
	if err := lock(sig); err != nil {
		return err
	}
	env := []string{fmt.Sprintf("DKV_LOCK_TOKEN=%d", m.Token()), "DKV_RWLOCK_MODE=" + mode}
	waitErr, lost, err := a.runChild(sig, s.Done(), env, prog, cargs)
	if err != nil {
		return err
	}
	if lost {
		return fmt.Errorf("%w: rwlock %q %s hold was lost while %s ran (its lease could not be renewed)", client.ErrLocked, name, mode, prog)
	}
	rctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	if err := m.Unlock(rctx); err != nil {
		fmt.Fprintf(a.stderr, "warning: releasing rwlock %q: %v\n", name, err)
	}
	return childResult(waitErr)
}

// runChild runs prog with dkv's stdio and env added to the environment
// until it exits, SIGTERMing it if lost closes (then lost is true) or dkv
// is interrupted (sig).
func (a *App) runChild(sig context.Context, lostc <-chan struct{}, env []string, prog string, cargs []string) (waitErr error, lost bool, err error) {
	child := exec.Command(prog, cargs...)
	child.Stdin, child.Stdout, child.Stderr = a.stdin, a.stdout, a.stderr
	child.Env = append(os.Environ(), env...)
	if err := child.Start(); err != nil {
		return nil, false, fmt.Errorf("starting %s: %w", prog, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	select {
	case waitErr = <-exited:
	case <-lostc:
		_ = child.Process.Signal(syscall.SIGTERM)
		<-exited
		return nil, true, nil
	case <-sig.Done():
		_ = child.Process.Signal(syscall.SIGTERM)
		waitErr = <-exited
	}
	return waitErr, false, nil
}
