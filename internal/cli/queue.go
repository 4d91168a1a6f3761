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
	"github.com/dkv-io/dkv/client/recipe"
	"github.com/spf13/cobra"
)

type jsonJob struct {
	ID          string `json:"id"`
	Payload     string `json:"payload"`
	Priority    int32  `json:"priority"`
	RunAt       string `json:"run_at"`
	EnqueuedAt  string `json:"enqueued_at"`
	Attempt     int    `json:"attempt"`
	MaxAttempts int    `json:"max_attempts"`
	LastError   string `json:"last_error,omitempty"`
	State       string `json:"state,omitempty"`
	Claim       string `json:"claim,omitempty"`
	Token       int64  `json:"token,omitempty"`
}

func infoJSON(i recipe.JobInfo) jsonJob {
	return jsonJob{ID: i.ID, Payload: string(i.Payload), Priority: i.Priority, RunAt: i.RunAt.UTC().Format(time.RFC3339Nano),
		EnqueuedAt: i.EnqueuedAt.UTC().Format(time.RFC3339Nano), Attempt: i.Attempt, MaxAttempts: i.MaxAttempts,
		LastError: i.LastError, State: i.State}
}

func (a *App) queueCmd() *cobra.Command {
	var visibility time.Duration
	cmd := &cobra.Command{
		Use:   "queue",
		Short: "Job queues: push, claim, ack, nack, list, dead, requeue, purge, stats, pause, resume",
		Long: `A job queue that loses nothing (docs/recipes.md, "Job queue"). A claim is a
store-enforced lock on the job, held for the visibility timeout: "claim"
prints a CLAIM string that "ack", "nack" and "extend" take (and that
"dkv put --lock CLAIM" accepts, for writes that only the current claim may
make). Once the claim expired or moved on they exit with 5 (Locked).`,
		Args: Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error { return Usagef("queue needs a subcommand") },
	}
	cmd.PersistentFlags().DurationVar(&visibility, "visibility", recipe.DefaultVisibilityTimeout, "visibility timeout of claims (at least 1s)")
	withQueue := func(name string, fn func(ctx context.Context, q *recipe.Queue) error) error {
		return a.run(func(ctx context.Context, c *client.Client) error {
			q, err := recipe.NewQueue(c, name, recipe.WithVisibilityTimeout(visibility))
			if err != nil {
				return err
			}
			return fn(ctx, q)
		})
	}

	var priority int32
	var delay time.Duration
	var runAt, idem string
	var maxAttempts int
	push := &cobra.Command{
		Use:   "push QUEUE PAYLOAD",
		Short: "Enqueue a job and print its id",
		Args:  Args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			opts := []recipe.EnqueueOption{recipe.WithPriority(priority), recipe.WithDelay(delay)}
			if runAt != "" {
				t, err := time.Parse(time.RFC3339, runAt)
				if err != nil {
					return Usagef("--run-at %q: want RFC 3339, e.g. 2026-12-01T15:00:00Z", runAt)
				}
				opts = append(opts, recipe.WithRunAt(t))
			}
			if maxAttempts != 0 {
				opts = append(opts, recipe.WithMaxAttempts(maxAttempts))
			}
			if idem != "" {
				opts = append(opts, recipe.WithIdempotencyKey(idem))
			}
			return withQueue(argv[0], func(ctx context.Context, q *recipe.Queue) error {
				e, err := q.Enqueue(ctx, []byte(argv[1]), opts...)
				if err != nil {
					return err
				}
				if a.JSON() {
					return WriteJSON(a.stdout, map[string]any{"id": e.ID, "duplicate": e.Duplicate})
				}
				if e.Duplicate {
					fmt.Fprintf(a.stdout, "%s (duplicate)\n", e.ID)
					return nil
				}
				fmt.Fprintln(a.stdout, e.ID)
				return nil
			})
		},
	}
	push.Flags().Int32Var(&priority, "priority", 0, "priority; higher is claimed first")
	push.Flags().DurationVar(&delay, "delay", 0, "make the job visible after this delay")
	push.Flags().StringVar(&runAt, "run-at", "", "make the job visible at this time (RFC 3339)")
	push.Flags().IntVar(&maxAttempts, "max-attempts", 0, "claims before the job is dead-lettered (default: the queue's, 10)")
	push.Flags().StringVar(&idem, "idempotency-key", "", "return the earlier job pushed with this key (within 24h) instead of a new one")

	var wait bool
	claim := &cobra.Command{
		Use:   "claim QUEUE",
		Short: "Claim the next visible job: print ID ATTEMPT CLAIM, then the payload",
		Long: `Claim the next visible job and print "ID ATTEMPT CLAIM" on one line and the
payload on the next. Without --wait it exits with 3 (NotFound) when no job
is visible; with --wait it waits (no time limit: --timeout bounds connecting
only) until one is, or until interrupted.`,
		Args: Args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			show := func(j *recipe.Job) error {
				if a.JSON() {
					out := infoJSON(recipe.JobInfo{ID: j.ID, Payload: j.Payload, Priority: j.Priority, RunAt: j.RunAt,
						EnqueuedAt: j.EnqueuedAt, Attempt: j.Attempt, MaxAttempts: j.MaxAttempts, LastError: j.LastError, State: "claimed"})
					out.Claim, out.Token = j.ClaimString(), j.Token()
					return WriteJSON(a.stdout, out)
				}
				fmt.Fprintf(a.stdout, "%s %d %s\n%s\n", j.ID, j.Attempt, j.ClaimString(), j.Payload)
				return nil
			}
			if !wait {
				return withQueue(argv[0], func(ctx context.Context, q *recipe.Queue) error {
					j, err := q.TryClaim(ctx)
					if errors.Is(err, recipe.ErrNoJob) {
						return &client.Error{Kind: client.ErrNotFound, Msg: fmt.Sprintf("queue %q has no visible job", argv[0])}
					}
					if err != nil {
						return err
					}
					return show(j)
				})
			}
			sig, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			c, err := a.connect(sig)
			if err != nil {
				return err
			}
			defer c.Close()
			q, err := recipe.NewQueue(c, argv[0], recipe.WithVisibilityTimeout(visibility))
			if err != nil {
				return err
			}
			j, err := q.Claim(sig)
			if err != nil {
				return err
			}
			return show(j)
		},
	}
	claim.Flags().BoolVar(&wait, "wait", false, "wait until a job is visible")

	onClaim := func(use, short string, fn func(ctx context.Context, j *recipe.Job) error) *cobra.Command {
		return &cobra.Command{
			Use:   use + " QUEUE CLAIM",
			Short: short,
			Args:  Args(cobra.ExactArgs(2)),
			RunE: func(cmd *cobra.Command, argv []string) error {
				return withQueue(argv[0], func(ctx context.Context, q *recipe.Queue) error {
					j, err := q.ResumeClaim(ctx, argv[1])
					if err != nil {
						return err
					}
					return fn(ctx, j)
				})
			},
		}
	}
	// ack and nack say that they took effect, as put does: "OK", or with
	// -o json {"id": ..., "done": "acked"|"nacked"|"dead"}.
	done := func(j *recipe.Job, what string) error {
		if a.JSON() {
			return WriteJSON(a.stdout, map[string]string{"id": j.ID, "done": what})
		}
		fmt.Fprintln(a.stdout, "OK")
		return nil
	}
	ack := onClaim("ack", "Complete a claimed job (exit 5 if the claim expired)", func(ctx context.Context, j *recipe.Job) error {
		if err := j.Ack(ctx); err != nil {
			return err
		}
		return done(j, "acked")
	})
	var nackErr string
	var retryAfter time.Duration
	var dead bool
	nack := onClaim("nack", "Fail a claimed job: retry after backoff, or dead-letter after its last attempt", func(ctx context.Context, j *recipe.Job) error {
		var opts []recipe.NackOption
		if retryAfter >= 0 {
			opts = append(opts, recipe.WithRetryAfter(retryAfter))
		}
		if dead {
			opts = append(opts, recipe.WithDeadLetter())
		}
		if err := j.Nack(ctx, errors.New(nackErr), opts...); err != nil {
			return err
		}
		if dead {
			return done(j, "dead")
		}
		return done(j, "nacked")
	})
	nack.Flags().StringVar(&nackErr, "error", "nacked", "the failure, kept as the job's last error")
	nack.Flags().DurationVar(&retryAfter, "retry-after", -1, "retry after this delay instead of the backoff (attempt⁴ s + jitter)")
	nack.Flags().BoolVar(&dead, "dead", false, "dead-letter the job now")
	extend := onClaim("extend", "Renew a claim to the full visibility timeout", func(ctx context.Context, j *recipe.Job) error {
		ttl, err := j.Extend(ctx)
		if err == nil {
			fmt.Fprintln(a.stdout, ttl)
		}
		return err
	})

	var limit int
	printJobs := func(jobs []recipe.JobInfo) error {
		if a.JSON() {
			out := make([]jsonJob, 0, len(jobs))
			for _, j := range jobs {
				out = append(out, infoJSON(j))
			}
			return WriteJSON(a.stdout, out)
		}
		for _, j := range jobs {
			fmt.Fprintf(a.stdout, "%s %s priority=%d attempt=%d/%d run_at=%s", j.ID, j.State, j.Priority, j.Attempt, j.MaxAttempts, j.RunAt.UTC().Format(time.RFC3339))
			if j.LastError != "" {
				fmt.Fprintf(a.stdout, " last_error=%q", j.LastError)
			}
			fmt.Fprintf(a.stdout, " payload=%q\n", j.Payload)
		}
		return nil
	}
	list := &cobra.Command{
		Use:   "list QUEUE",
		Short: "List waiting jobs (visible, scheduled, claimed) in claim order",
		Args:  Args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return withQueue(argv[0], func(ctx context.Context, q *recipe.Queue) error {
				jobs, err := q.List(ctx, limit)
				if err != nil {
					return err
				}
				return printJobs(jobs)
			})
		},
	}
	list.Flags().IntVar(&limit, "limit", 100, "list at most N jobs (0: all)")
	deadCmd := &cobra.Command{
		Use:   "dead QUEUE [ID]",
		Short: "List the dead-letter list, or show one dead job",
		Args:  Args(cobra.RangeArgs(1, 2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return withQueue(argv[0], func(ctx context.Context, q *recipe.Queue) error {
				if len(argv) == 2 {
					j, err := q.InspectDead(ctx, argv[1])
					if err != nil {
						return err
					}
					return printJobs([]recipe.JobInfo{*j})
				}
				jobs, err := q.Dead(ctx, limit)
				if err != nil {
					return err
				}
				return printJobs(jobs)
			})
		},
	}
	deadCmd.Flags().IntVar(&limit, "limit", 100, "list at most N jobs (0: all)")
	requeue := &cobra.Command{
		Use:   "requeue QUEUE ID",
		Short: "Move a dead job back into the queue, visible now, attempts reset",
		Args:  Args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return withQueue(argv[0], func(ctx context.Context, q *recipe.Queue) error { return q.Requeue(ctx, argv[1]) })
		},
	}
	var all bool
	purge := &cobra.Command{
		Use:   "purge QUEUE ID | purge QUEUE --all",
		Short: "Delete a dead job, or the whole dead-letter list",
		Args:  Args(cobra.RangeArgs(1, 2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if all == (len(argv) == 2) {
				return Usagef("purge takes either an ID or --all")
			}
			id := ""
			if len(argv) == 2 {
				id = argv[1]
			}
			return withQueue(argv[0], func(ctx context.Context, q *recipe.Queue) error {
				n, err := q.Purge(ctx, id)
				if err == nil {
					fmt.Fprintln(a.stdout, n)
				}
				return err
			})
		},
	}
	purge.Flags().BoolVar(&all, "all", false, "purge every dead job")
	stats := &cobra.Command{
		Use:   "stats QUEUE",
		Short: "Count the queue's jobs: visible, claimed, scheduled, dead, and the oldest visible job's age",
		Args:  Args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return withQueue(argv[0], func(ctx context.Context, q *recipe.Queue) error {
				st, err := q.Stats(ctx)
				if err != nil {
					return err
				}
				if a.JSON() {
					return WriteJSON(a.stdout, map[string]any{"visible": st.Visible, "claimed": st.Claimed, "scheduled": st.Scheduled,
						"dead": st.Dead, "paused": st.Paused, "oldest_age_seconds": st.OldestAge.Seconds(), "revision": st.Revision})
				}
				fmt.Fprintf(a.stdout, "visible=%d claimed=%d scheduled=%d dead=%d paused=%v oldest_age=%v\n",
					st.Visible, st.Claimed, st.Scheduled, st.Dead, st.Paused, st.OldestAge.Round(time.Millisecond))
				return nil
			})
		},
	}
	simple := func(use, short string, fn func(ctx context.Context, q *recipe.Queue) error) *cobra.Command {
		return &cobra.Command{Use: use + " QUEUE", Short: short, Args: Args(cobra.ExactArgs(1)),
			RunE: func(cmd *cobra.Command, argv []string) error { return withQueue(argv[0], fn) }}
	}
	pause := simple("pause", "Stop handing out jobs until resume", func(ctx context.Context, q *recipe.Queue) error { return q.Pause(ctx) })
	resume := simple("resume", "Resume a paused queue", func(ctx context.Context, q *recipe.Queue) error { return q.Resume(ctx) })
	cmd.AddCommand(push, claim, ack, nack, extend, list, deadCmd, requeue, purge, stats, pause, resume)
	return cmd
}
