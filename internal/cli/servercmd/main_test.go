package servercmd_test

import (
	"testing"

	"github.com/dkv-io/dkv/internal/cli/clitest"
)

// The tests of the server-side commands run the dkv binary, as a user
// does: dev-cluster starts members as child processes of itself.
func TestMain(m *testing.M) { clitest.Main(m) }
