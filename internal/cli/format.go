package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/client"
)

// memberID is how dkv prints a member id, in text and in -o json alike:
// decimal, as a string, the form the HTTP/JSON API (protojson) uses for
// uint64 fields, so an id copied from one works in the other.
func memberID(id uint64) string { return strconv.FormatUint(id, 10) }

// parseMemberID reads a member id in decimal (what dkv and the HTTP API
// print) or in hex (what older dkv versions and the logs printed), with
// or without 0x. A string of decimal digits is decimal.
func parseMemberID(s string) (uint64, bool) {
	if id, err := strconv.ParseUint(s, 10, 64); err == nil && id != 0 {
		return id, true
	}
	h := strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	if id, err := strconv.ParseUint(h, 16, 64); err == nil && id != 0 {
		return id, true
	}
	return 0, false
}

// resolveMember maps a command's NAME argument to a member name: a
// member's name is taken as is; otherwise an id (decimal or hex) of a
// member is replaced by that member's name. Anything else is returned
// unchanged for the server to refuse.
func resolveMember(ctx context.Context, c *client.Client, arg string) string {
	id, ok := parseMemberID(arg)
	if !ok {
		return arg
	}
	ml, err := c.MemberList(ctx)
	if err != nil {
		return arg
	}
	for _, m := range ml.GetMembers() {
		if m.GetName() == arg {
			return arg
		}
	}
	for _, m := range ml.GetMembers() {
		if m.GetId() == id {
			return m.GetName()
		}
	}
	return arg
}

// memberNames asks the member c talks to for the names of the members it
// knows, without a quorum round (so it answers while the cluster has no
// leader). nil if it cannot.
func memberNames(ctx context.Context, c *client.Client) map[uint64]string {
	ml, err := dkvpb.NewClusterClient(c.Conn()).MemberList(ctx, &dkvpb.MemberListRequest{})
	if err != nil {
		return nil
	}
	names := map[uint64]string{}
	for _, m := range ml.GetMembers() {
		names[m.GetId()] = m.GetName()
	}
	return names
}

// humanBytes prints a size with a binary unit and the exact byte count:
// "3.6 KiB (3722 bytes)".
func humanBytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d bytes", n)
	}
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	v, u := float64(n)/1024, 0
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	return fmt.Sprintf("%.1f %s (%d bytes)", v, units[u], n)
}
