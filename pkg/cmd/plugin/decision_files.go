package plugin

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
)

// fileExtensions are those kubectl reads from a directory given with -f.
var fileExtensions = []string{".json", ".yaml", ".yml"}

// maxResourceFile bounds what -f reads from one file: requests are a few
// kilobytes each, and a file far larger than any list of them is a
// mistake (a binary, a log), not something to hold in memory.
const maxResourceFile = 64 << 20

// requestNamesFromFiles reads the names of the rekey
// CertificateSigningRequests in the files, directories (their .json,
// .yaml and .yml files; with recursive, those below too) and "-"
// (stdin), as kubectl's -f does: YAML or JSON, several documents, Lists.
// Any other object is an error that names it, so that a file meant for
// another command (a certificates.k8s.io request, say) is not half acted
// on.
func requestNamesFromFiles(paths []string, recursive bool, stdin io.Reader) ([]string, error) {
	var names []string
	read := func(source string, r io.Reader) error {
		found, err := requestNamesFrom(source, io.LimitReader(r, maxResourceFile))
		names = append(names, found...)
		return err
	}
	for _, p := range paths {
		if p == "-" {
			if stdin == nil {
				return nil, errors.New("-f -: no standard input")
			}
			if err := read("standard input", stdin); err != nil {
				return nil, err
			}
			continue
		}
		info, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("-f %s: %w", p, err)
		}
		if !info.IsDir() {
			if err := readFile(p, read); err != nil {
				return nil, err
			}
			continue
		}
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if path != p && !recursive {
					return filepath.SkipDir
				}
				return nil
			}
			if !hasResourceExtension(path) {
				return nil
			}
			return readFile(path, read)
		})
		if err != nil {
			return nil, err
		}
	}
	return names, nil
}

func readFile(path string, read func(string, io.Reader) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("-f %s: %w", path, err)
	}
	defer func() { _ = f.Close() }()
	return read(path, f)
}

func hasResourceExtension(path string) bool {
	for _, ext := range fileExtensions {
		if strings.HasSuffix(path, ext) {
			return true
		}
	}
	return false
}

// requestNamesFrom decodes every document of one source.
func requestNamesFrom(source string, r io.Reader) ([]string, error) {
	dec := yaml.NewYAMLOrJSONDecoder(r, 4096)
	var names []string
	for doc := 1; ; doc++ {
		var obj map[string]any
		err := dec.Decode(&obj)
		if errors.Is(err, io.EOF) {
			return names, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", source, doc, err)
		}
		if obj == nil {
			// An empty document ("---" twice).
			continue
		}
		found, err := requestNamesOf(&unstructured.Unstructured{Object: obj})
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", source, doc, err)
		}
		names = append(names, found...)
	}
}

var requestKind = certv1alpha1.SchemeGroupVersion.WithKind("CertificateSigningRequest")

// requestNamesOf is the name of a rekey request, or those of a List's.
func requestNamesOf(u *unstructured.Unstructured) ([]string, error) {
	gvk := u.GroupVersionKind()
	if u.IsList() {
		var names []string
		err := u.EachListItem(func(item runtime.Object) error {
			found, err := requestNamesOf(item.(*unstructured.Unstructured))
			names = append(names, found...)
			return err
		})
		return names, err
	}
	switch {
	case gvk.Kind == "":
		return nil, errors.New("not a Kubernetes object (no kind)")
	case gvk.Kind == requestKind.Kind && gvk.Group == "certificates.k8s.io":
		return nil, fmt.Errorf("%s CertificateSigningRequest %q is the host cluster's, not rekey's: kubectl certificate approve|deny decides those", gvk.GroupVersion(), u.GetName())
	case gvk.GroupKind() != (schema.GroupKind{Group: requestKind.Group, Kind: requestKind.Kind}):
		return nil, fmt.Errorf("%s %s %q is not a CertificateSigningRequest of %s", gvk.GroupVersion(), gvk.Kind, u.GetName(), requestKind.Group)
	case u.GetName() == "":
		return nil, fmt.Errorf("CertificateSigningRequest without metadata.name (generateName %q): name it by the name its create printed", u.GetGenerateName())
	}
	return []string{u.GetName()}, nil
}
