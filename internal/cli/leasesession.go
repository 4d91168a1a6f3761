package cli

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/dkv-io/dkv/client/concurrency"
)

// leaseSession is the set-up shared by the commands that hold something
// on a lease while they run (semaphore, rwlock, barrier enter, presence
// register): a context that Ctrl-C or SIGTERM ends and a session with
// ttl on a new client. done closes the client and the signal handler, not
// the session: each command decides whether its end revokes the lease.
func (a *App) leaseSession(ttl time.Duration) (ctx context.Context, s *concurrency.Session, done func(), err error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	c, err := a.connect(ctx)
	if err != nil {
		stop()
		return nil, nil, nil, err
	}
	s, err = concurrency.NewSession(ctx, c, concurrency.WithTTL(ttl))
	if err != nil {
		c.Close()
		stop()
		return nil, nil, nil, err
	}
	return ctx, s, func() { c.Close(); stop() }, nil
}

// childResult is dkv's result for the exit of the command it ran under
// a lock, permit or read-write lock: the command's exit code.
func childResult(waitErr error) error {
	var ee *exec.ExitError
	switch {
	case waitErr == nil:
		return nil
	case errors.As(waitErr, &ee):
		code := ee.ExitCode()
		if code < 0 {
			code = 128 + int(syscall.SIGTERM)
		}
		return childExitError{code}
	default:
		return waitErr
	}
}
