package bench

import (
	"context"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
)

func init() {
	Register("ratelimit", "one exact rate-limit decision (1 token) on a random bucket of --keys; --rate-limit/--rate-burst set the bucket (a refusal is a decision, not an error)", func() Workload { return rateLimitWorkload{} })
}

type rateLimitWorkload struct{}

func (rateLimitWorkload) Setup(context.Context, *Env) error { return nil }

func (rateLimitWorkload) NewWorker(i int, env *Env) (Worker, error) {
	rl, r := dkvpb.NewRateLimitClient(env.WriteConn(i)), env.Rand(i)
	limit, burst := env.Opts.RateLimit, env.Opts.RateBurst
	if limit <= 0 {
		limit = 1_000_000
	}
	if burst <= 0 {
		burst = 1000
	}
	return WorkerFunc(func(ctx context.Context) error {
		_, err := rl.Allow(ctx, &dkvpb.RateLimitRequest{Key: env.Key(r.IntN(env.Opts.Keys)), Limit: limit, PeriodMs: 1000, Burst: burst, N: 1})
		return err
	}), nil
}
