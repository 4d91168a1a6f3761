package httpapi

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"slices"

	"github.com/dkv-io/dkv/internal/dkverr"
)

type WhoamiPermission struct {
	Type     string `json:"type"`      // READ, WRITE or READWRITE
	Key      string `json:"key"`       // base64, as in the JSON API
	RangeEnd string `json:"range_end"` // base64; empty: the key alone; "AA==" ("\0"): every key from key on
}

type WhoamiResponse struct {
	Enabled     bool               `json:"enabled"`
	User        string             `json:"user,omitempty"`
	Root        bool               `json:"root,omitempty"`
	Roles       []string           `json:"roles,omitempty"`
	Permissions []WhoamiPermission `json:"permissions,omitempty"`
}

// Whoami serves GET /v1/auth/whoami: whether auth is enabled
// and, with it, the caller's user, roles and permissions (the union of
// its roles'), so that a client such as the dashboard can hide what the
// user may not do. Any authenticated user may ask about itself (UserGet
// and RoleGet need root); without a valid token it answers 401.
func (a *API) Whoami(w http.ResponseWriter, r *http.Request) {
	v := a.n.AuthView()
	resp := WhoamiResponse{Enabled: v.Enabled}
	if v.Enabled {
		u, err := a.n.Caller(a.n.RequestContext(r), v)
		if err != nil {
			Error(w, a.n.WireError(err))
			return
		}
		if u == nil {
			Error(w, dkverr.New(dkverr.Unauthenticated, "no caller"))
			return
		}
		resp.User, resp.Root, resp.Roles = u.Name, u.Root, slices.Clone(u.Roles)
		enc := base64.StdEncoding.EncodeToString
		for _, role := range v.State.GetRoles() {
			if !slices.Contains(u.Roles, role.GetName()) {
				continue
			}
			for _, p := range role.GetPermissions() {
				resp.Permissions = append(resp.Permissions, WhoamiPermission{Type: p.GetType().String(), Key: enc(p.GetKey()), RangeEnd: enc(p.GetRangeEnd())})
			}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(resp)
}
