package version

import (
	"os"
	"strings"
	"testing"

	utilversion "k8s.io/apimachinery/pkg/util/version"
)

func TestBaseMatchesVERSIONFile(t *testing.T) {
	data, err := os.ReadFile("../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(data)); got != Base {
		t.Fatalf("VERSION says %q, pkg/version.Base %q: change both", got, Base)
	}
	if _, err := utilversion.ParseSemantic("v" + Base); err != nil {
		t.Fatalf("VERSION %q is not a semantic version: %v", Base, err)
	}
}

func TestGitVersionIsSemanticAndNeverAPlaceholder(t *testing.T) {
	none := func() (map[string]string, bool) { return nil, false }
	vcs := func(settings map[string]string) func() (map[string]string, bool) {
		return func() (map[string]string, bool) { return settings, true }
	}
	const commit = "0123456789abcdef0123456789abcdef01234567"
	for name, tc := range map[string]struct {
		info          Info
		wantVersion   string
		wantCommit    string
		wantTreeState string
	}{
		"stamped by the Makefile": {
			info:        get("0.1.0", commit, "clean", "2026-11-24T21:00:00Z", none),
			wantVersion: "v0.1.0+0123456789ab", wantCommit: commit, wantTreeState: "clean",
		},
		"stamped, dirty tree": {
			info:        get("v0.2.0-rc.1\n", commit, "dirty", "", none),
			wantVersion: "v0.2.0-rc.1+0123456789ab.dirty", wantCommit: commit, wantTreeState: "dirty",
		},
		"go build: the toolchain's VCS stamp": {
			info:        get("", "", "", "", vcs(map[string]string{"vcs.revision": commit, "vcs.modified": "true", "vcs.time": "2026-11-24T21:00:00Z"})),
			wantVersion: "v" + Base + "+0123456789ab.dirty", wantCommit: commit, wantTreeState: "dirty",
		},
		"go test or go run: nothing recorded": {
			info:        get("", "", "", "", vcs(map[string]string{})),
			wantVersion: "v" + Base, wantCommit: "unknown",
		},
		"a $Format placeholder is never reported": {
			info:        get("", "$Format:%H$", "", "", none),
			wantVersion: "v" + Base, wantCommit: "unknown",
		},
	} {
		t.Run(name, func(t *testing.T) {
			if got := tc.info.GitVersion(); got != tc.wantVersion {
				t.Errorf("GitVersion() = %q, want %q", got, tc.wantVersion)
			}
			if tc.info.GitCommit != tc.wantCommit || tc.info.GitTreeState != tc.wantTreeState {
				t.Errorf("commit %q tree %q, want %q %q", tc.info.GitCommit, tc.info.GitTreeState, tc.wantCommit, tc.wantTreeState)
			}
			k := tc.info.Kubernetes()
			if _, err := utilversion.ParseSemantic(k.GitVersion); err != nil {
				t.Errorf("gitVersion %q does not parse as kubectl parses it: %v", k.GitVersion, err)
			}
			if strings.Contains(k.GitVersion+k.GitCommit+tc.info.String(), "$Format") {
				t.Errorf("placeholder reported: %+v", k)
			}
		})
	}
}

func TestThisBinary(t *testing.T) {
	info := Get()
	k := info.Kubernetes()
	v, err := utilversion.ParseSemantic(k.GitVersion)
	if err != nil {
		t.Fatalf("gitVersion %q: %v", k.GitVersion, err)
	}
	parts := strings.Split(Base, ".")
	if k.Major != parts[0] || k.Minor != parts[1] || v.String() != strings.TrimPrefix(k.GitVersion, "v") {
		t.Errorf("major %q minor %q for %s", k.Major, k.Minor, k.GitVersion)
	}
	if strings.Contains(info.String(), "$Format") {
		t.Errorf("String() = %q", info.String())
	}
}
