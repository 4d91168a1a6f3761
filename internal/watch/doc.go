// Package watch is DKV's watch hub: it fans the events of applied commands
// out to watchers, and replays history from Pebble for watchers that start
// in the past or fall behind.
//
// # Who calls it
//
// The server's state machine calls Hub.Publish from raftnode's apply
// goroutine after each apply batch is committed to Pebble (from the Ready
// loop for a batch holding a conf change), and Hub.Reset from the Ready
// loop after a snapshot replaced the state. Publish only appends to a bounded queue;
// the hub's own goroutine does the matching and fan-out, so watchers never
// take the apply path's time. Each gRPC Watch stream owns a Stream; its
// sender goroutine drains the stream's queued responses with Pop.
//
// # Synced and catching-up watchers
//
// The hub has fanned out every revision <= Hub.rev. A watcher is either
// synced (it has been given every event of its range up to Hub.rev, and
// receives new revisions straight from the fan-out) or catching up (it
// has every event below nextRev; the catch-up goroutine replays
// [nextRev, Hub.rev] from the change log and history through a Pebble
// snapshot, then moves it back to synced once nextRev > Hub.rev). The
// move happens under Hub.mu, the lock the fan-out holds, so no revision
// is delivered twice or skipped.
//
// A synced watcher whose queue would exceed Config.MaxQueueBytes is
// moved to catching up at the revision it could not take: memory per
// watcher stays bounded, and a slow watcher never makes the fan-out (or a
// fast watcher) wait. Catch-up reads only when the watcher's queue has
// room. If its nextRev is below the compact revision (or at it, for a
// watcher with prev_kv: the versions before it are gone), the watcher is
// cancelled with COMPACTED and the compact revision.
//
// When the apply path outruns the hub by more than
// Config.MaxPendingEvents, Publish drops the events and keeps only the
// revision: a gap. Processing a gap moves every synced watcher to catching
// up, so a gap costs reads, never events. Reset is a gap too.
//
// # Invariants
//
//   - Each watcher receives the events of its range with revision >= its
//     start, in revision order, each exactly once; the events of one
//     revision are in one item (one response, or consecutive fragments).
//   - Catch-up only reads revisions <= Hub.rev, which are committed to
//     Pebble before Publish is called, and never reads while a raft
//     snapshot is being installed (keys.SnapshotInstalling is set): the
//     state is then half replaced, and a read would skip revisions.
//   - Each event is encoded once (per prev_kv variant) however many
//     watchers receive it; responses carry the encoded bytes.
package watch
