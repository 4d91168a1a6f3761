package client

import (
	"context"
	"errors"
	"time"
)

// The client's one retry policy and one backoff schedule. Every loop
// that sends something again (unary calls in invoke, watch streams,
// the keep-alive stream) waits with a backoff and, where it classifies
// failures, asks opKind.retries.

// maxBackoff caps the delay between retries.
const maxBackoff = time.Second

// backoff is the schedule between attempts: Config.RetryBackoff first,
// doubling up to maxBackoff.
type backoff struct {
	base, next time.Duration
}

func newBackoff(base time.Duration) backoff {
	if base <= 0 {
		base = 25 * time.Millisecond
	}
	return backoff{base: base, next: base}
}

// reset starts the schedule over, after an attempt that worked.
func (b *backoff) reset() { b.next = b.base }

// wait sleeps for the next delay and reports true, or returns false at
// once when ctx ends. If during is not nil it runs every tick meanwhile
// (the keep-alive stream expires leases while it waits to reconnect).
func (b *backoff) wait(ctx context.Context, tick time.Duration, during func()) bool {
	d := b.next
	b.next = min(2*b.next, maxBackoff)
	t := time.NewTimer(d)
	defer t.Stop()
	var tc <-chan time.Time
	if during != nil && tick > 0 {
		tk := time.NewTicker(tick)
		defer tk.Stop()
		tc = tk.C
	}
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		case <-tc:
			during()
		}
	}
}

// opKind is what was attempted, which decides what may be retried.
type opKind int

const (
	// opRead changes nothing: any unavailability may be retried.
	opRead opKind = iota
	// opWrite may be retried only when it certainly did not apply.
	opWrite
	// opStream resumes where it left off (a watch from its revision), so
	// it is retried on everything but a definite refusal.
	opStream
	// opOnce is a write in a client session (session.go): the cluster
	// applies it at most once however often it is sent, so it is
	// retried on any unavailability and on an unknown outcome.
	opOnce
)

// errClass is what a failure says about retrying.
type errClass int

const (
	// classFinal: a definite answer or refusal, or the caller's ctx;
	// never retried.
	classFinal errClass = iota
	// classRefused: the server refused the request before applying it
	// (a DKV Unavailable), or it never left this process.
	classRefused
	// classUnavailable: the transport failed after sending, or the
	// endpoint stopped answering; a write may have applied.
	classUnavailable
	// classUnknown: a write was sent and its outcome is unknown (the
	// connection broke, the member stopped answering, or a deadline
	// passed after sending); ErrUnknownOutcome.
	classUnknown
	// classBroken: the server or the stream failed otherwise (Internal,
	// a reset stream, a deadline on the server's side); only a resumable
	// stream tries again.
	classBroken
)

// retries is the retry policy.
func (k opKind) retries(c errClass) bool {
	switch c {
	case classRefused:
		return true
	case classUnavailable:
		return k != opWrite
	case classUnknown:
		return k == opOnce
	case classBroken:
		return k == opStream
	}
	return false
}

// streamRetryable reports whether a stream that failed with err should
// be opened again (a watch then resumes after its last revision, so a
// retry cannot duplicate events).
func streamRetryable(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		// Made by this package from a cancel response or a check.
		return errors.Is(e.Kind, ErrUnavailable)
	}
	if errors.Is(err, context.Canceled) {
		return false
	}
	return opStream.retries(classify(context.Background(), err, true, false).class)
}
