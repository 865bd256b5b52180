// Package version is the version of rekey's binaries: the release from
// VERSION and the git commit they were built from, stamped by the Makefile
// (-ldflags -X, hack/version-ldflags.sh) or, for `go build`, `go run` and
// `go test`, read from what the Go toolchain recorded.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"

	apimachineryversion "k8s.io/apimachinery/pkg/version"
)

// Base is the release in VERSION, for builds the Makefile did not stamp; a
// unit test keeps the two equal.
const Base = "0.1.0"

// Set with -ldflags "-X rekey.io/rekey/pkg/version.<name>=<value>"
// (hack/version-ldflags.sh). Empty: Base and the toolchain's VCS stamp.
var (
	// version is VERSION's content, without the leading v.
	version string
	// gitCommit is the full hash of the commit built.
	gitCommit string
	// gitTreeState is "clean" or "dirty".
	gitTreeState string
	// buildDate is the commit's time (not the build's, so that the same
	// source gives the same binary), RFC 3339 in UTC.
	buildDate string
)

// Info is what a binary reports about itself.
type Info struct {
	// Version is the release, e.g. 0.1.0.
	Version string
	// GitCommit is the full commit hash, or "unknown".
	GitCommit string
	// GitTreeState is "clean", "dirty" or "" when unknown.
	GitTreeState string
	// BuildDate is the commit's time, or "" when unknown.
	BuildDate string
}

// Get returns the version of this binary.
func Get() Info {
	return get(version, gitCommit, gitTreeState, buildDate, readBuildInfo)
}

func readBuildInfo() (map[string]string, bool) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return nil, false
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	return settings, true
}

func get(v, commit, treeState, date string, buildInfo func() (map[string]string, bool)) Info {
	info := Info{Version: strings.TrimPrefix(strings.TrimSpace(v), "v"), GitCommit: commit, GitTreeState: treeState, BuildDate: date}
	if info.Version == "" {
		info.Version = Base
	}
	// Without the Makefile's stamp, `go build` inside a git checkout
	// records the revision itself (vcs.*); `go run` and `go test` do not.
	if info.GitCommit == "" {
		if settings, ok := buildInfo(); ok {
			info.GitCommit = settings["vcs.revision"]
			if info.BuildDate == "" {
				info.BuildDate = settings["vcs.time"]
			}
			if info.GitTreeState == "" {
				switch settings["vcs.modified"] {
				case "true":
					info.GitTreeState = "dirty"
				case "false":
					info.GitTreeState = "clean"
				}
			}
		}
	}
	if !isHex(info.GitCommit) {
		info.GitCommit = "unknown"
	}
	return info
}

// isHex reports whether s looks like a commit hash: never a "$Format:%H$"
// placeholder or anything else that would not parse as semver metadata.
func isHex(s string) bool {
	if len(s) < 7 {
		return false
	}
	for _, r := range s {
		if !strings.ContainsRune("0123456789abcdef", r) {
			return false
		}
	}
	return true
}

// GitVersion is the semantic version with the commit as build metadata:
// v0.1.0+1a2b3c4d5e6f, with ".dirty" when built from a modified tree, and
// v0.1.0 alone when the commit is unknown.
func (i Info) GitVersion() string {
	v := "v" + i.Version
	if i.GitCommit == "unknown" || i.GitCommit == "" {
		return v
	}
	short := i.GitCommit
	if len(short) > 12 {
		short = short[:12]
	}
	v += "+" + short
	if i.GitTreeState == "dirty" {
		v += ".dirty"
	}
	return v
}

// String is the one line the binaries' --version prints.
func (i Info) String() string {
	s := fmt.Sprintf("%s (commit %s", i.GitVersion(), i.GitCommit)
	if i.GitTreeState == "dirty" {
		s += ", modified"
	}
	return s + ")"
}

// Kubernetes is the version as /version reports it (what `kubectl
// version` prints): gitVersion is rekey's release, not Kubernetes'.
func (i Info) Kubernetes() apimachineryversion.Info {
	major, minor := "0", "0"
	if parts := strings.SplitN(i.Version, ".", 3); len(parts) >= 2 {
		if _, err := strconv.Atoi(parts[0]); err == nil {
			major = parts[0]
		}
		if _, err := strconv.Atoi(parts[1]); err == nil {
			minor = parts[1]
		}
	}
	return apimachineryversion.Info{
		Major:        major,
		Minor:        minor,
		GitVersion:   i.GitVersion(),
		GitCommit:    i.GitCommit,
		GitTreeState: i.GitTreeState,
		BuildDate:    i.BuildDate,
		GoVersion:    runtime.Version(),
		Compiler:     runtime.Compiler,
		Platform:     runtime.GOOS + "/" + runtime.GOARCH,
	}
}
