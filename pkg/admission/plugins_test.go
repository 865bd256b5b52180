package admission

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	"rekey.io/rekey/pkg/admission/requestnames"
	"rekey.io/rekey/pkg/apis/certificates"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/controller/credential"
)

// TestEveryPluginIsRegisteredAndListed: RegisterAll and PluginNames agree,
// so no plugin is registered without running or listed without existing.
func TestEveryPluginIsRegisteredAndListed(t *testing.T) {
	plugins := admission.NewPlugins()
	RegisterAll(plugins)
	registered := plugins.Registered()
	if len(registered) != len(PluginNames) {
		t.Fatalf("registered %v, listed %v", registered, PluginNames)
	}
	for _, name := range PluginNames {
		found := false
		for _, r := range registered {
			found = found || r == name
		}
		if !found {
			t.Errorf("%s is listed but not registered", name)
		}
	}
}

// TestRotatingCredentialRequestNamesAreReserved: the requests a
// ClientCertificate minter makes are named predictably (RequestName); a
// user who may create requests must not be able to plant one of those
// names, which would make that credential's rotation fail for good
// (RequestConflict). The plugin that refuses it runs in the chain.
func TestRotatingCredentialRequestNamesAreReserved(t *testing.T) {
	rc := &rotationv1alpha1.RotatingCredential{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "db"}}
	name := credential.RequestName(rc, 2)
	if !strings.HasPrefix(name, requestnames.Prefix) {
		t.Fatalf("request name %q is outside the reserved prefix %q", name, requestnames.Prefix)
	}
	if !slices.Contains(PluginNames, requestnames.PluginName) {
		t.Fatalf("%s does not run (PluginNames %v)", requestnames.PluginName, PluginNames)
	}
	plugins := admission.NewPlugins()
	RegisterAll(plugins)
	chain, err := plugins.NewFromPlugins([]string{requestnames.PluginName}, noConfig{}, admission.PluginInitializers{}, admission.Decorators{})
	if err != nil {
		t.Fatal(err)
	}
	a := admission.NewAttributesRecord(&certificates.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: name}}, nil,
		certificates.Kind("CertificateSigningRequest").WithVersion("v1alpha1"), "", name,
		certificates.Resource("certificatesigningrequests").WithVersion("v1alpha1"), "", admission.Create, &metav1.CreateOptions{}, false,
		&user.DefaultInfo{Name: "mallory", Groups: []string{user.AllAuthenticated}})
	if err := chain.(admission.ValidationInterface).Validate(context.Background(), a, nil); !apierrors.IsForbidden(err) {
		t.Fatalf("a user planted request %s: %v", name, err)
	}
}

type noConfig struct{}

func (noConfig) ConfigFor(string) (io.Reader, error) { return nil, nil }
