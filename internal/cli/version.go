package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version overrides the version dkv reports (a release sets it; `make
// build VERSION=v1.2.3` does):
//
//	go build -ldflags "-X github.com/dkv-io/dkv/internal/cli.version=v1.2.3" ./cmd/dkv
var version string

// commit is the commit dkv was built from when the build says so (`make
// build` does); else the build info's VCS stamp gives it.
var commit string

type buildVersion struct {
	Version  string `json:"version"`
	Commit   string `json:"commit,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

// currentVersion is the -ldflags override if set, else the module version
// `go install ...@vX` records, else the server's version (a build from a
// checkout, by go build or make build: the same string `dkv status`
// shows; serverVersion is Server.Version, "unknown" when dkv is built
// without the server side); the commit comes from the build info's VCS
// stamp, and String appends it.
func currentVersion(serverVersion string) buildVersion {
	v := buildVersion{Version: version, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	info, ok := debug.ReadBuildInfo()
	if v.Version == "" && ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		v.Version = info.Main.Version
	}
	if v.Version == "" {
		if serverVersion == "" {
			serverVersion = "unknown"
		}
		v.Version = serverVersion
	}
	if commit != "" {
		v.Commit = commit
	} else if ok {
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Commit = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	return v
}

func (v buildVersion) String() string {
	s := v.Version
	if v.Commit != "" {
		c := v.Commit
		if len(c) > 12 {
			c = c[:12]
		}
		if v.Modified {
			c += "+modified"
		}
		s += " (commit " + c + ")"
	}
	return s + ", " + v.Go + " " + v.Platform
}

// addVersion gives root --version and a version subcommand; both print
// "dkv version V (commit C), goX os/arch".
func (a *App) addVersion(root *cobra.Command, serverVersion string) {
	root.Version = currentVersion(serverVersion).String()
	root.SetVersionTemplate("dkv version {{.Version}}\n")
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print dkv's version, commit and Go version",
		Args:  Args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := currentVersion(serverVersion)
			if a.JSON() {
				return WriteJSON(a.stdout, v)
			}
			_, err := fmt.Fprintf(a.stdout, "dkv version %s\n", v)
			return err
		},
	})
}
