// Package install installs rekey into a real one-node Kubernetes cluster
// as an operator does: its images imported into containerd from the
// tarballs `make image` writes, then `kubectl apply -k artifacts/deploy`
// (and the ha overlay), and checks that it serves, keeps its data across a
// pod's death and uninstalls without leftovers.
package install

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"rekey.io/rekey/test/framework"
)

var cluster *framework.KubeCluster

// imageTag is the tag hack/build-images.sh gives (v + VERSION), which
// artifacts/deploy names.
func imageTag() string {
	data, err := os.ReadFile(filepath.Join(framework.RepoRoot(), "VERSION"))
	if err != nil {
		panic(err)
	}
	return "v" + strings.TrimSpace(string(data))
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	defer framework.RemoveBinaries()
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "install: "+format+"\n", args...) }
	dir, err := os.MkdirTemp("", "rekey-install-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	images := filepath.Join(dir, "images")
	logf("building the images (hack/build-images.sh) into %s", images)
	build := exec.Command(filepath.Join(framework.RepoRoot(), "hack", "build-images.sh"), "pause", "rekey-apiserver")
	build.Env = append(os.Environ(), "IMAGE_OUT="+images)
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building images: %v\n%s\n", err, out)
		return 1
	}
	cluster, err = framework.StartKubeCluster(dir, framework.KubeClusterOptions{
		Images:       []string{filepath.Join(images, "pause.tar"), filepath.Join(images, "rekey-apiserver.tar")},
		SandboxImage: "rekey.io/pause:" + imageTag(),
		Logf:         logf,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the cluster: %v\nlogs in %s\n", err, dir)
		return 1
	}
	code := m.Run()
	cluster.Stop()
	if code == 0 {
		_ = os.RemoveAll(dir)
	} else {
		fmt.Fprintf(os.Stderr, "logs kept in %s\n", dir)
	}
	return code
}
