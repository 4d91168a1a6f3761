package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/dkv-io/dkv/client"
	"github.com/spf13/cobra"
)

// childExitError carries the exit code of a command dkv ran (dkv lock KEY
// -- COMMAND): dkv exits with it and prints nothing more.
type childExitError struct{ code int }

func (e childExitError) Error() string { return fmt.Sprintf("command exited with %d", e.code) }

// childExitCode reports the code a childExitError carries.
func childExitCode(err error) (int, bool) {
	var ce childExitError
	if errors.As(err, &ce) {
		return ce.code, true
	}
	return 0, false
}

// lockOpt turns --lock HANDLE into an option (nil when empty).
func lockOpt(s string) (client.OpOption, error) {
	if s == "" {
		return nil, nil
	}
	h, err := client.ParseLockHandle(s)
	if err != nil {
		return nil, Usagef("--lock: %v", err)
	}
	return client.WithLock(h), nil
}

type jsonLock struct {
	Handle string `json:"handle,omitempty"`
	Key    string `json:"key"`
	Token  int64  `json:"token,omitempty"`
	Lease  int64  `json:"lease,omitempty"`
	Owner  string `json:"owner,omitempty"`
}

func (a *App) lockCmd() *cobra.Command {
	var ttlFlag string
	cmd := &cobra.Command{
		Use:   "lock KEY --ttl 10s -- COMMAND [ARGS...] | lock SUBCOMMAND",
		Short: "Store-enforced locks: acquire, release, show, or run a command under a lock",
		Long: `Locks are enforced by the store: while KEY is locked, a write to it without
the current lock handle (dkv put KEY VAL --lock HANDLE) fails with exit 5
(Locked), and so does any write made with a handle that is no longer current.
See docs/locks.md.

dkv lock KEY --ttl 10s -- COMMAND ARGS... waits for the lock, then runs
COMMAND with the handle in DKV_LOCK_HANDLE (and the fencing token in
DKV_LOCK_TOKEN), renewing the lock while COMMAND runs; it releases the lock
when COMMAND ends and exits with COMMAND's exit code. If the lock is lost
meanwhile (the lease could not be renewed within its TTL), COMMAND gets
SIGTERM and dkv exits with 5. The wait for the lock has no time limit
(--timeout bounds connecting only).`,
		Args: Args(cobra.ArbitraryArgs),
		RunE: func(cmd *cobra.Command, argv []string) error {
			dash := cmd.ArgsLenAtDash()
			if dash != 1 || len(argv) < 2 {
				return Usagef("lock needs a subcommand (acquire, release, renew, show) or KEY -- COMMAND")
			}
			ttl, err := parseTTL("--ttl", ttlFlag)
			if err != nil {
				return err
			}
			return a.lockRun(argv[0], ttl, argv[1], argv[2:])
		},
	}
	cmd.Flags().StringVar(&ttlFlag, "ttl", "10s", "lock TTL: how long the lock outlives a dkv that stops renewing it")
	cmd.AddCommand(a.lockAcquireCmd(), a.lockReleaseCmd(), a.lockRenewCmd(), a.lockShowCmd())
	return cmd
}

func (a *App) lockAcquireCmd() *cobra.Command {
	var (
		ttlFlag string
		wait    bool
	)
	cmd := &cobra.Command{
		Use:   "acquire KEY",
		Short: "Acquire a lock; prints its handle",
		Long: `Acquire KEY's lock and print its handle, an opaque string to pass to
--lock and to 'dkv lock release'. The lock expires --ttl after it was granted
unless renewed ('dkv lock renew HANDLE') or released. If the lock is held,
exit with 5 (Locked) at once, or with --wait queue for it (first come, first
served) until it is granted or dkv is interrupted; --timeout bounds
connecting only, never the wait.`,
		Args: Args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			ttl, err := parseTTL("--ttl", ttlFlag)
			if err != nil {
				return err
			}
			key := argv[0]
			if !wait {
				return a.run(func(ctx context.Context, c *client.Client) error {
					r, err := c.TryAcquire(ctx, key, ttl)
					if err != nil {
						return err
					}
					if !r.Acquired {
						return heldErr(key, r.Holder)
					}
					return a.printHandle(r.Handle)
				})
			}
			sig, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			c, err := a.connect(sig)
			if err != nil {
				return err
			}
			defer c.Close()
			h, err := c.Acquire(sig, key, ttl)
			if err != nil {
				return err
			}
			return a.printHandle(h)
		},
	}
	cmd.Flags().StringVar(&ttlFlag, "ttl", "10s", "lock TTL (e.g. 10s; 1s to 1 year)")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait in the queue while the lock is held")
	return cmd
}

func heldErr(key string, holder *client.LockHandle) error {
	if holder == nil {
		return fmt.Errorf("%w: lock %q is held", client.ErrLocked, key)
	}
	return fmt.Errorf("%w: lock %q is held (fencing token %d, lease %d)", client.ErrLocked, key, holder.Token, holder.Lease)
}

func (a *App) printHandle(h client.LockHandle) error {
	if a.JSON() {
		return WriteJSON(a.stdout, jsonLock{Handle: h.String(), Key: h.Key, Token: h.Token, Lease: h.Lease, Owner: h.Owner})
	}
	fmt.Fprintln(a.stdout, h.String())
	return nil
}

func parseHandleArg(s string) (client.LockHandle, error) {
	h, err := client.ParseLockHandle(s)
	if err != nil {
		return h, Usagef("%v", err)
	}
	return h, nil
}

func (a *App) lockReleaseCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "release HANDLE",
		Short: "Release a lock; exits 5 (Locked) if the handle was no longer current",
		Args:  Args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			h, err := parseHandleArg(argv[0])
			if err != nil {
				return err
			}
			return a.run(func(ctx context.Context, c *client.Client) error {
				if err := c.Release(ctx, h); err != nil {
					return err
				}
				fmt.Fprintln(a.stdout, "OK")
				return nil
			})
		},
	}
}

func (a *App) lockRenewCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "renew HANDLE",
		Short: "Renew a lock to its full TTL; exits 5 (Locked) if the handle is not current",
		Args:  Args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			h, err := parseHandleArg(argv[0])
			if err != nil {
				return err
			}
			return a.run(func(ctx context.Context, c *client.Client) error {
				ttl, err := c.Renew(ctx, h)
				if err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "renewed for %v\n", ttl)
				return nil
			})
		},
	}
}

func (a *App) lockShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "show KEY",
		Short: "Show a lock's holder, fencing token, remaining TTL and queue length",
		Args:  Args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.run(func(ctx context.Context, c *client.Client) error {
				info, err := c.DescribeLock(ctx, argv[0])
				if err != nil {
					return err
				}
				if a.JSON() {
					out := map[string]any{"key": info.Key, "held": info.Holder != nil, "queue_length": info.QueueLength, "last_token": info.LastToken}
					if info.Holder != nil {
						out["token"] = info.Holder.Token
						out["lease"] = info.Holder.Lease
						out["owner"] = info.Holder.Owner
						out["remaining_ms"] = info.Remaining.Milliseconds()
					}
					return WriteJSON(a.stdout, out)
				}
				if info.Holder == nil {
					fmt.Fprintf(a.stdout, "free (last token %d, %d waiting)\n", info.LastToken, info.QueueLength)
					return nil
				}
				h := info.Holder
				fmt.Fprintf(a.stdout, "held token=%d lease=%d owner=%s remaining=%v waiting=%d\n",
					h.Token, h.Lease, h.Owner, info.Remaining.Round(time.Millisecond), info.QueueLength)
				return nil
			})
		},
	}
}

// lockRun holds key's lock while a command runs.
func (a *App) lockRun(key string, ttl time.Duration, name string, cargs []string) error {
	sig, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := a.connect(sig)
	if err != nil {
		return err
	}
	defer c.Close()
	h, err := c.Acquire(sig, key, ttl)
	if err != nil {
		return err
	}
	kctx, kcancel := context.WithCancel(context.Background())
	defer kcancel()
	lost, err := c.KeepAlive(kctx, h.Lease)
	if err != nil {
		a.releaseQuietly(c, h)
		return err
	}
	child := exec.Command(name, cargs...)
	child.Stdin, child.Stdout, child.Stderr = a.stdin, a.stdout, a.stderr
	child.Env = append(os.Environ(), "DKV_LOCK_HANDLE="+h.String(), fmt.Sprintf("DKV_LOCK_TOKEN=%d", h.Token))
	if err := child.Start(); err != nil {
		a.releaseQuietly(c, h)
		return fmt.Errorf("starting %s: %w", name, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	var waitErr error
	lockLost := false
	select {
	case waitErr = <-exited:
	case <-lost:
		lockLost = true
		_ = child.Process.Signal(syscall.SIGTERM)
		waitErr = <-exited
	case <-sig.Done():
		_ = child.Process.Signal(syscall.SIGTERM)
		waitErr = <-exited
	}
	kcancel()
	if lockLost {
		return fmt.Errorf("%w: lock %q was lost while %s ran (its lease could not be renewed)", client.ErrLocked, key, name)
	}
	a.releaseQuietly(c, h)
	return childResult(waitErr)
}

func (a *App) releaseQuietly(c *client.Client, h client.LockHandle) {
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	if err := c.Release(ctx, h); err != nil {
		fmt.Fprintf(a.stderr, "warning: releasing lock %q: %v\n", h.Key, err)
	}
}
