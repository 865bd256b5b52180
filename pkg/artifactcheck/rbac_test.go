package artifactcheck

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

const rbacDir = "../../artifacts/rbac"

// JWTSignerCA is the CertificateAuthority name docs/service-account-keys.md
// uses, and the only one the shipped rekey:jwt-signer may sign with.
const JWTSignerCA = "service-account-tokens"

// installed decodes every document of every file artifacts/rbac's
// kustomization lists, strictly (an unknown field fails), into kinds
// by "Kind/name".
func installed(t *testing.T) map[string][]byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(rbacDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(raw, &k); err != nil {
		t.Fatal(err)
	}
	objects := map[string][]byte{}
	for _, f := range k.Resources {
		raw, err := os.ReadFile(filepath.Join(rbacDir, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range bytes.Split(raw, []byte("\n---")) {
			var meta struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if meta.Kind == "" {
				continue // comments only
			}
			objects[meta.Kind+"/"+meta.Metadata.Name] = doc
		}
	}
	return objects
}

func decode(t *testing.T, objects map[string][]byte, key string, into any) {
	t.Helper()
	doc, ok := objects[key]
	if !ok {
		t.Fatalf("artifacts/rbac installs no %s", key)
	}
	if err := yaml.UnmarshalStrict(doc, into); err != nil {
		t.Fatalf("%s: %v", key, err)
	}
}

// allows reports whether rules grant verb on group/resource (with
// "/subresource") named name, as RBAC reads them.
func allows(rules []rbacv1.PolicyRule, verb, group, resource, name string) bool {
	for _, r := range rules {
		if (slices.Contains(r.Verbs, verb) || slices.Contains(r.Verbs, "*")) &&
			(slices.Contains(r.APIGroups, group) || slices.Contains(r.APIGroups, "*")) &&
			(slices.Contains(r.Resources, resource) || slices.Contains(r.Resources, "*")) &&
			(len(r.ResourceNames) == 0 || slices.Contains(r.ResourceNames, name)) {
			return true
		}
	}
	return false
}

// TestJWTSignerRoleIsNarrow: the shipped rekey:jwt-signer signs with, and
// holds the rotations of (trust), only the documented CA: a stolen signer
// certificate must not hold another CA's rotation (one replacing a
// compromised Certificates CA, say) or sign with another key. It still
// has all the signer uses: get, list and watch of its CA (a watch by
// metadata.name is authorized against the name), its TrustConsumer.
func TestJWTSignerRoleIsNarrow(t *testing.T) {
	var role rbacv1.ClusterRole
	decode(t, installed(t), "ClusterRole/rekey:jwt-signer", &role)
	const group = "rotation.rekey.io"
	for _, r := range role.Rules {
		if slices.Contains(r.Resources, "certificateauthorities/signjwt") || slices.Contains(r.Verbs, "trust") || slices.Contains(r.Resources, "*") || slices.Contains(r.Verbs, "*") {
			if !slices.Equal(r.ResourceNames, []string{JWTSignerCA}) {
				t.Errorf("rule %+v: resourceNames %v, want [%s]", r, r.ResourceNames, JWTSignerCA)
			}
		}
	}
	for _, want := range []struct{ verb, resource, name string }{
		{"create", "certificateauthorities/signjwt", JWTSignerCA},
		{"get", "certificateauthorities", JWTSignerCA},
		{"list", "certificateauthorities", JWTSignerCA},
		{"watch", "certificateauthorities", JWTSignerCA},
		{"trust", "certificateauthorities", JWTSignerCA},
		{"create", "trustconsumers", ""},
		{"get", "trustconsumers", "kube-apiserver-jwt.cp-1"},
		{"update", "trustconsumers", "kube-apiserver-jwt.cp-1"},
		{"patch", "trustconsumers/status", "kube-apiserver-jwt.cp-1"},
		{"update", "trustconsumers/status", "kube-apiserver-jwt.cp-1"},
	} {
		if !allows(role.Rules, want.verb, group, want.resource, want.name) {
			t.Errorf("rekey:jwt-signer does not allow %s %s %q", want.verb, want.resource, want.name)
		}
	}
	for _, never := range []struct{ verb, resource string }{
		{"create", "certificateauthorities/signjwt"},
		{"trust", "certificateauthorities"},
		{"update", "certificateauthorities"},
	} {
		if allows(role.Rules, never.verb, group, never.resource, "other-ca") {
			t.Errorf("rekey:jwt-signer allows %s %s on a CA other than %s", never.verb, never.resource, JWTSignerCA)
		}
	}
}
