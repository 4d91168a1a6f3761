// Package recipe builds distributed-work patterns on DKV's public client
// API: things several identical workers need besides "only one of us
// does it" (locks and election, in client/concurrency).
//
// The recipes:
//
//   - Queue: a named job queue that loses nothing. Enqueue with a
//     priority, a run-at time or delay, a maximum number of attempts and
//     an idempotency key; Claim blocks (woken by a watch, never by
//     polling) and returns a Job whose claim is a store-enforced lock on
//     the job's key, held on a lease whose TTL is the visibility timeout.
//     Ack, Nack, Cancel and writes made WithClaim(job) are refused once
//     the claim expired or moved on, so a worker paused past its timeout
//     cannot complete a job another worker now owns. Jobs that fail
//     MaxAttempts times move to the queue's dead-letter list.
//   - Semaphore, RWMutex, Barrier and DoubleBarrier (files semaphore*.go,
//     rwlock*.go, barrier*.go) and the cluster-wide rate limiter
//     (ratelimit*.go): see their own documentation.
//   - Cache (cache*.go): a watch-backed, in-memory copy of a prefix.
//   - Register, Members and WatchMembers (presence*.go): presence groups.
//   - STM (stm*.go): software transactions over many keys, etcd's isolation levels.
//   - SessionStore (session*.go): web sessions on leases with an atomic Update.
//   - Flags (flag*.go): feature flags evaluated locally, sticky rollouts.
//   - Reconciler (reconcile*.go): a level-triggered control loop on the elected leader, fenced writes.
//   - DecideCanary and CanaryController (canary*.go): progressive delivery by the canary rule.
//
// Every recipe takes the narrowest client interfaces it needs (KV,
// Locker, Lease, Watcher), so it runs against a remote cluster, an
// embedded node (server/embed) or a wrapper alike. Recipes keep their
// state under their own key prefix ("dkv.queue/NAME/" for a queue);
// docs/recipes.md describes the layouts and the guarantees.
//
// Invariants the queue keeps (and its tests and the chaos checker
// verify): a job is in exactly one of visible, scheduled, claimed or
// dead until it is acked; an ack is applied only while its claim is the
// job's current lock holder; no job is lost across leader changes or
// consumer crashes.
package recipe
