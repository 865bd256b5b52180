// Command image packages one static binary as a single-layer OCI image on an
// empty base and writes it as a tarball that `docker load` and
// `ctr images import` accept. The same binary gives the same image digest:
// every timestamp is zero and the layer holds nothing else.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	var o options
	flag.StringVar(&o.binary, "binary", "", "static binary to package")
	flag.StringVar(&o.ref, "ref", "", "image reference, e.g. rekey.io/rekey-apiserver:v0.1.0")
	flag.StringVar(&o.out, "out", "", "tarball to write")
	flag.StringVar(&o.user, "user", "65532:65532", "user the image runs as (numeric, so that runAsNonRoot can check it)")
	flag.StringVar(&o.version, "version", "", "value of the org.opencontainers.image.version label")
	flag.Parse()
	if o.binary == "" || o.ref == "" || o.out == "" {
		fmt.Fprintln(os.Stderr, "usage: image -binary FILE -ref NAME:TAG -out FILE.tar")
		os.Exit(2)
	}
	digest, err := o.write()
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	fmt.Printf("%s %s %s\n", o.out, o.ref, digest)
}

type options struct {
	binary, ref, out, user, version string
}

// write builds the image and writes the tarball, returning the image digest.
func (o options) write() (v1.Hash, error) {
	bin, err := os.ReadFile(o.binary)
	if err != nil {
		return v1.Hash{}, err
	}
	img, err := build(path.Base(o.binary), bin, o.user, o.version)
	if err != nil {
		return v1.Hash{}, err
	}
	tag, err := name.NewTag(o.ref)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("-ref %q: %w", o.ref, err)
	}
	tmp := o.out + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		return v1.Hash{}, err
	}
	if err := os.Rename(tmp, o.out); err != nil {
		return v1.Hash{}, err
	}
	return img.Digest()
}

// build returns an image whose only file is /<name>, its entrypoint.
func build(name string, binary []byte, user, version string) (v1.Image, error) {
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	if err := tw.WriteHeader(&tar.Header{
		Name: name, Mode: 0o555, Size: int64(len(binary)), Typeflag: tar.TypeReg,
		ModTime: time.Unix(0, 0), Format: tar.FormatPAX,
	}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(binary); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layer.Bytes())), nil
	})
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cf.Config.Entrypoint = []string{"/" + name}
	cf.Config.User = user
	cf.Config.WorkingDir = "/"
	cf.Config.Labels = map[string]string{"org.opencontainers.image.title": name}
	if version != "" {
		cf.Config.Labels["org.opencontainers.image.version"] = version
	}
	return mutate.ConfigFile(img, cf)
}
