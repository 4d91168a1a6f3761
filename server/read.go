package server

import "github.com/dkv-io/dkv/internal/state"

// applied is how handlers read the applied state: through the state
// package's Reader, not the storage engine. Node plumbing that owns the
// storage (bootstrap, the corruption checks, maintenance and defrag,
// snapshots, the peer transport, leader handoff, the lessor's reload)
// reads s.store directly.
func (s *Server) applied() state.Reader { return s.sm }
