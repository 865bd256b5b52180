package admission

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	genericadmissioninit "k8s.io/apiserver/pkg/admission/initializer"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"rekey.io/rekey/pkg/admission/rekeyinit"
	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/pkg/apis/rotation"
)

// lookups fails the test on any read: a plugin that looks at a signjwt
// request at all is one that switched on the resource without the
// subresource.
type lookups struct{ t *testing.T }

func (l lookups) authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	l.t.Errorf("a plugin asked the authorizer about %s %s/%s", a.GetVerb(), a.GetResource(), a.GetSubresource())
	return authorizer.DecisionDeny, "", nil
}

func (l lookups) GetCA(_ context.Context, name string) (*rotation.CertificateAuthority, error) {
	l.t.Errorf("a plugin read CertificateAuthority %s", name)
	return nil, nil
}

type caGetter struct{ lookups }

func (g caGetter) Get(ctx context.Context, name string) (*rotation.CertificateAuthority, error) {
	return g.GetCA(ctx, name)
}

type credGetter struct{ lookups }

func (g credGetter) Get(_ context.Context, ns, name string) (*rotation.RotatingCredential, error) {
	g.t.Errorf("a plugin read RotatingCredential %s/%s", ns, name)
	return nil, nil
}

func (g credGetter) List(_ context.Context, ns string) ([]*rotation.RotatingCredential, error) {
	g.t.Errorf("a plugin listed RotatingCredentials in %s", ns)
	return nil, nil
}

type signerGetter struct{ lookups }

func (g signerGetter) Get(_ context.Context, name string) (*certificates.Signer, error) {
	g.t.Errorf("a plugin read Signer %s", name)
	return nil, nil
}

type authorizerInit struct{ a authorizer.Authorizer }

func (i authorizerInit) Initialize(p admission.Interface) {
	if w, ok := p.(genericadmissioninit.WantsAuthorizer); ok {
		w.SetAuthorizer(i.a)
	}
}

// TestSignJWTPassesEveryPlugin: a create of certificateauthorities/NAME/
// signjwt carries a JWTSignRequest, not a CertificateAuthority; every
// plugin must let it through without reading anything (the plugins that
// check CAs switch on the subresource too), or signing would fail with a
// "expected a CertificateAuthority" 403.
func TestSignJWTPassesEveryPlugin(t *testing.T) {
	l := lookups{t}
	plugins := admission.NewPlugins()
	RegisterAll(plugins)
	chain, err := plugins.NewFromPlugins(PluginNames, noConfig{}, admission.PluginInitializers{
		authorizerInit{authorizer.AuthorizerFunc(l.authorize)},
		rekeyinit.Initializer{CertificateAuthorities: caGetter{l}, RotatingCredentials: credGetter{l}, Signers: signerGetter{l}},
	}, admission.Decorators{})
	if err != nil {
		t.Fatal(err)
	}
	a := admission.NewAttributesRecord(&rotation.JWTSignRequest{Claims: "eyJleHAiOjF9"}, nil,
		rotation.Kind("JWTSignRequest").WithVersion("v1alpha1"), "", "sa-keys",
		rotation.Resource("certificateauthorities").WithVersion("v1alpha1"), "signjwt", admission.Create, &metav1.CreateOptions{}, false,
		&user.DefaultInfo{Name: "rekey:jwt-signer:cp-1", Groups: []string{user.AllAuthenticated}})
	if m, ok := chain.(admission.MutationInterface); ok && m.Handles(admission.Create) {
		if err := m.Admit(context.Background(), a, nil); err != nil {
			t.Fatalf("mutating admission refused signjwt: %v", err)
		}
	}
	if err := chain.(admission.ValidationInterface).Validate(context.Background(), a, nil); err != nil {
		t.Fatalf("validating admission refused signjwt: %v", err)
	}
}
