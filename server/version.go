package server

import (
	"fmt"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/state"
)

// The version rule: two members can run in one cluster when their server
// versions have the same major number and minor numbers at most one apart
// (0.1.x with 0.1.y or 0.2.y; not 0.1.x with 0.3.y, nor 1.x with 2.x).
// So an upgrade goes one minor version at a time, member by member, and a
// cluster is never asked to run three minor versions at once. The patch
// number never matters. A member checks the rule against the versions
// recorded in the member table: when it joins (the running members'
// versions, before it asks to be added) and when it starts on an existing
// data dir (the versions the others last published). A member that has
// published no version (older than the member table's version field) is
// not checked.

// parseVersion reads "major.minor[.patch][-suffix]".
func parseVersion(v string) (major, minor int, err error) { return state.ParseVersion(v) }

// VersionsCompatible reports whether members running versions a and b
// may be in one cluster: the same major version and minor versions at
// most one apart. An error says which rule failed.
func VersionsCompatible(a, b string) error {
	amaj, amin, err := parseVersion(a)
	if err != nil {
		return err
	}
	bmaj, bmin, err := parseVersion(b)
	if err != nil {
		return err
	}
	if amaj != bmaj {
		return fmt.Errorf("versions %s and %s have different major versions", a, b)
	}
	if d := amin - bmin; d > 1 || d < -1 {
		return fmt.Errorf("versions %s and %s are %d minor versions apart (at most 1 is allowed: upgrade one minor version at a time)", a, b, max(d, -d))
	}
	return nil
}

// checkVersions refuses to run version mine beside any member in ms
// (other than self) whose recorded version is incompatible.
func checkVersions(mine string, self uint64, ms []*dkvpb.Member) error {
	for _, m := range ms {
		if m.GetId() == self || m.GetVersion() == "" {
			continue
		}
		if err := VersionsCompatible(mine, m.GetVersion()); err != nil {
			return fmt.Errorf("member %q runs dkv %s and this member is %s: %v (docs/operations.md#upgrades)", m.GetName(), m.GetVersion(), mine, err)
		}
	}
	return nil
}
