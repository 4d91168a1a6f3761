// Package server is an embeddable DKV node: Config, New, Start, Stop.
//
// A Server owns one Pebble database (raft log and state machine), one raft
// node and the client-facing gRPC and HTTP/JSON endpoints. The dkv CLI's
// serve command and the Go client's embedded mode both run a Server; tests
// run many in one process.
//
// Every state change is proposed through raft and acknowledged only after it
// has been applied; linearizable reads wait on a ReadIndex round.
package server
