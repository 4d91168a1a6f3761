package cli_test

import (
	"encoding/json"
	"testing"

	"github.com/dkv-io/dkv/internal/cli/clitest"
)

// 'dkv status' after a restart reports the database's size on disk: the
// large values are in blob files, which Pebble's metrics stop counting
// once the database is reopened (a 345 MiB store read 29.5 MiB, and the
// quota compared that).
func TestStatusDBSizeAfterRestart(t *testing.T) {
	const load = 16 << 20
	dir := t.TempDir()
	n := clitest.StartServe(t, dir)
	loadValues(t, n.Addr, load/(512<<10), 512<<10)
	size := func(n *clitest.Node) (int64, int64) {
		var st struct {
			DBSize      int64 `json:"db_size"`
			DBSizeInUse int64 `json:"db_size_in_use"`
		}
		if err := json.Unmarshal([]byte(n.OK("", "-o", "json", "status")), &st); err != nil {
			t.Fatal(err)
		}
		return st.DBSize, st.DBSizeInUse
	}
	n.OK("", "defrag") // flushes: the values go to blob files before the restart
	before, _ := size(n)
	n.Kill()
	n = clitest.StartServe(t, dir)
	after, inUse := size(n)
	t.Logf("db size %d before the restart, %d after (in use %d)", before, after, inUse)
	// Every value is stored at least once (its history record; twice in
	// storage layout 2) besides the raft log entry.
	if after < load {
		t.Errorf("db size after a restart is %d bytes; %d bytes of values were written", after, load)
	}
	if inUse < load {
		t.Errorf("db size in use after a restart is %d bytes; %d bytes of values were written", inUse, load)
	}
}
