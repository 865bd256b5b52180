package credentialminter

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"rekey.io/rekey/pkg/apis/rotation"
)

// allow grants exactly the attributes listed, as "verb group/resource/subresource name ns".
func allow(grants ...string) authorizer.Authorizer {
	return authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		key := a.GetVerb() + " " + a.GetAPIGroup() + "/" + a.GetResource() + "/" + a.GetSubresource() + " " + a.GetName() + " " + a.GetNamespace()
		for _, g := range grants {
			if g == key {
				return authorizer.DecisionAllow, "", nil
			}
		}
		return authorizer.DecisionNoOpinion, "", nil
	})
}

func attrs(rc, old *rotation.RotatingCredential) admission.Attributes {
	op := admission.Create
	if old != nil {
		op = admission.Update
	}
	return admission.NewAttributesRecord(rc, rcOrNil(old), rotation.Kind("RotatingCredential").WithVersion("v1alpha1"), "team", "db",
		rotation.Resource("rotatingcredentials").WithVersion("v1alpha1"), "", op, &metav1.CreateOptions{}, false, &user.DefaultInfo{Name: "alice"})
}

func rcOrNil(rc *rotation.RotatingCredential) runtime.Object {
	if rc == nil {
		return nil
	}
	return rc
}

func withMinter(m rotation.Minter) *rotation.RotatingCredential {
	return &rotation.RotatingCredential{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "team"}, Spec: rotation.RotatingCredentialSpec{Minter: m}}
}

func TestMinterPermissions(t *testing.T) {
	cert := rotation.Minter{Type: rotation.MinterClientCertificate, ClientCertificate: &rotation.ClientCertificateMinter{SignerName: "example.com/team", CommonName: "app"}}
	token := rotation.Minter{Type: rotation.MinterServiceAccountToken, ServiceAccountToken: &rotation.ServiceAccountTokenMinter{ServiceAccountName: "app"}}
	hook := rotation.Minter{Type: rotation.MinterWebhook, Webhook: &rotation.WebhookMinter{URL: "https://mint.example.com"}}
	random := rotation.Minter{Type: rotation.MinterRandom, Random: &rotation.RandomMinter{Key: "token", Length: 32}}
	for name, tc := range map[string]struct {
		minter  rotation.Minter
		grants  []string
		allowed bool
		says    string
	}{
		"random needs nothing":              {minter: random, allowed: true},
		"certificate without approve":       {minter: cert, says: `verb "approve"`},
		"certificate with approve":          {minter: cert, grants: []string{"approve certificates.rekey.io/signers/ example.com/team "}, allowed: true},
		"certificate with the domain":       {minter: cert, grants: []string{"approve certificates.rekey.io/signers/ example.com/* "}, allowed: true},
		"token without create on the token": {minter: token, says: "serviceaccounts/token"},
		"token with create on the token":    {minter: token, grants: []string{"create /serviceaccounts/token app team"}, allowed: true},
		"token for another namespace's SA":  {minter: token, grants: []string{"create /serviceaccounts/token app other"}, says: "serviceaccounts/token"},
		"webhook without use on the minter": {minter: hook, says: `"use" on resource "minters"`},
		"webhook with use on the minter":    {minter: hook, grants: []string{"use rotation.rekey.io/minters/ webhook "}, allowed: true},
	} {
		t.Run(name, func(t *testing.T) {
			p := New()
			p.SetAuthorizer(allow(tc.grants...))
			err := p.Validate(context.Background(), attrs(withMinter(tc.minter), nil), nil)
			if tc.allowed != (err == nil) || (!tc.allowed && !strings.Contains(err.Error(), tc.says)) {
				t.Fatalf("err %v", err)
			}
		})
	}
	// An update that keeps the minter is not checked again (an interval
	// change by someone without the minter's permission is fine); one that
	// changes it is.
	p := New()
	p.SetAuthorizer(allow())
	old := withMinter(hook)
	if err := p.Validate(context.Background(), attrs(withMinter(hook), old), nil); err != nil {
		t.Fatalf("unchanged minter: %v", err)
	}
	changed := withMinter(rotation.Minter{Type: rotation.MinterWebhook, Webhook: &rotation.WebhookMinter{URL: "https://elsewhere.example.com"}})
	if err := p.Validate(context.Background(), attrs(changed, old), nil); err == nil {
		t.Fatal("a new webhook URL without use on minters")
	}
	if err := New().ValidateInitialization(); err == nil {
		t.Fatal("initialized without an authorizer")
	}
}
