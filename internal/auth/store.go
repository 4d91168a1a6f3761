package auth

import (
	dkvpb "github.com/dkv-io/dkv/api/dkv/v1"
	"github.com/dkv-io/dkv/internal/storekeys"
)

// StoreSpan is the physical span a permission grants: its key range
// mapped into its store (internal/storekeys), which the server checks
// requests against after mapping them the same way. A default-store
// permission never reaches a named store's keys, not even "every key";
// ok is false for a permission that grants nothing (a default-store
// range inside the reserved range, or an invalid store name).
func StoreSpan(p *dkvpb.Permission) (Span, bool) {
	m, err := storekeys.For(p.GetStore())
	if err != nil {
		return Span{}, false
	}
	k, end, prefix, err := m.Range(p.GetKey(), p.GetRangeEnd(), false)
	if err != nil {
		return Span{}, false
	}
	if len(p.GetRangeEnd()) > 0 && len(end) == 0 && !prefix {
		return Span{}, false
	}
	return SpanOf(k, end, prefix), true
}
