// Package faultproxy is a fault-injecting TCP proxy for tests that run
// DKV as real processes. One Proxy stands in front of each member's peer
// address, and every member's --initial-cluster names the proxies, so all
// raft traffic to a member flows through its proxy. The proxy can then
// blackhole, reset or delay that traffic, for everyone or only for one
// sender (an asymmetric, one-way cut).
//
// A sender is recognised by an identify function (for processes on this machine,
// ProcessIdentifier maps a connection's source port to the process that
// owns it through /proc). Unidentified senders are affected only by
// faults that apply to every sender.
//
// Invariants: a healed proxy forwards bytes unchanged and in order;
// blackholing never delivers a byte out of order, it stalls the
// connection (as a partition does) until Heal or a Reset.
package faultproxy
