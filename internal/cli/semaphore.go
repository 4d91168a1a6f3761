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

// semaphoreCmd is `dkv semaphore NAME -n 3 -- COMMAND [ARGS...]`: run a
// command while holding one of NAME's n permits.
func (a *App) semaphoreCmd() *cobra.Command {
	var (
		n       int
		ttlFlag string
	)
	cmd := &cobra.Command{
		Use:   "semaphore NAME -n N [--ttl 10s] -- COMMAND [ARGS...]",
		Short: "Run a command while holding one of N permits (at most N at once, FIFO)",
		Long: `Wait, first come first served, for one of NAME's N permits, then run COMMAND
with the permit's lock handle in DKV_LOCK_HANDLE (a write made with --lock
HANDLE is refused once the permit is lost), its fencing token in
DKV_LOCK_TOKEN and its slot in DKV_SEMAPHORE_SLOT. The permit lives on a
lease renewed while COMMAND runs and is released when it ends; dkv exits with
COMMAND's exit code. If the permit is lost (the lease could not be renewed
within --ttl), COMMAND gets SIGTERM and dkv exits with 5 (Locked). Every
process must use the same N for NAME. See docs/recipes.md, "Semaphore".`,
		Example: `  dkv semaphore printers -n 3 -- ./print-job 42`,
		Args:    Args(cobra.ArbitraryArgs),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if cmd.ArgsLenAtDash() != 1 || len(argv) < 2 {
				return Usagef("semaphore needs NAME -- COMMAND")
			}
			ttl, err := parseTTL("--ttl", ttlFlag)
			if err != nil {
				return err
			}
			return a.semaphoreRun(argv[0], n, ttl, argv[1], argv[2:])
		},
	}
	cmd.Flags().IntVarP(&n, "n", "n", 1, "number of permits")
	cmd.Flags().StringVar(&ttlFlag, "ttl", "10s", "lease TTL: how long the permit outlives a dkv that stops renewing it")
	return cmd
}

func (a *App) semaphoreRun(name string, n int, ttl time.Duration, prog string, cargs []string) error {
	sig, s, done, err := a.leaseSession(ttl)
	if err != nil {
		return err
	}
	defer done()
	defer s.Close() // revokes the lease: the permit goes with it
	sem, err := recipe.NewSemaphore(s, name, n)
	if err != nil {
		return err
	}
	p, err := sem.Acquire(sig)
	if err != nil {
		return err
	}
	child := exec.Command(prog, cargs...)
	child.Stdin, child.Stdout, child.Stderr = a.stdin, a.stdout, a.stderr
	child.Env = append(os.Environ(), "DKV_LOCK_HANDLE="+p.Handle.String(), fmt.Sprintf("DKV_LOCK_TOKEN=%d", p.Token()),
		fmt.Sprintf("DKV_SEMAPHORE_SLOT=%d", p.Slot))
	if err := child.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", prog, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	var waitErr error
	select {
	case waitErr = <-exited:
	case <-s.Done():
		_ = child.Process.Signal(syscall.SIGTERM)
		<-exited
		return fmt.Errorf("%w: semaphore %q permit was lost while %s ran (its lease could not be renewed)", client.ErrLocked, name, prog)
	case <-sig.Done():
		_ = child.Process.Signal(syscall.SIGTERM)
		waitErr = <-exited
	}
	rctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	if err := p.Release(rctx); err != nil {
		fmt.Fprintf(a.stderr, "warning: releasing semaphore %q permit: %v\n", name, err)
	}
	return childResult(waitErr)
}
