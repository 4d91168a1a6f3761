// Package transport carries raft messages between members.
//
// GRPC is the production transport: one long-lived client stream per
// (sender, receiver) pair, each frame batching many raft messages, fed by a
// bounded per-peer queue. Send never blocks the raft loop: when a peer's
// queue is full or its stream is down, messages are dropped and the peer is
// reported unreachable (raft retransmits). Snapshots go on their own stream,
// in chunks, so they do not hold up heartbeats and appends, and raft is
// always told how they ended (ReportSnapshot).
//
// Every frame carries the cluster id; a receiver refuses frames from another
// cluster, so two clusters can never be mixed up.
//
// Faults lets tests drop, delay and partition traffic on the real transport.
package transport
