package server

import (
	"encoding/json"
	"testing"
)

// TestHTTPClusterStatuses: GET /v1/cluster/statuses carries each
// member's own Status (here the one member's).
func TestHTTPClusterStatuses(t *testing.T) {
	_, base, _ := startHTTPTestServer(t, Config{Name: "n1"})
	var got memberStatusResponse
	if code := getJSON(t, base+"/v1/cluster/statuses", &got); code != 200 {
		t.Fatalf("GET /v1/cluster/statuses: %d", code)
	}
	if len(got.Members) != 1 || got.Members[0].Name != "n1" || got.Members[0].ID != got.MemberID || got.Members[0].Error != "" {
		t.Fatalf("statuses = %+v, want n1 answering for itself", got)
	}
	var st struct {
		Name             string `json:"name"`
		RaftTerm         string `json:"raft_term"`
		RaftAppliedIndex string `json:"raft_applied_index"`
		DbSize           string `json:"db_size"`
	}
	if err := json.Unmarshal(got.Members[0].Status, &st); err != nil {
		t.Fatal(err)
	}
	if st.Name != "n1" || st.RaftTerm == "" || st.RaftAppliedIndex == "" || st.DbSize == "" {
		t.Errorf("n1's status = %s", got.Members[0].Status)
	}
}
