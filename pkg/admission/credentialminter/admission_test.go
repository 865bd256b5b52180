package credentialminter

import (
	"context"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"rekey.io/rekey/pkg/apis/certificates"
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
			p := newPlugin(allow(tc.grants...))
			err := p.Validate(context.Background(), attrs(withMinter(tc.minter), nil), nil)
			if tc.allowed != (err == nil) || (!tc.allowed && !strings.Contains(err.Error(), tc.says)) {
				t.Fatalf("err %v", err)
			}
		})
	}
	// An update that keeps the minter is not checked again (an interval
	// change by someone without the minter's permission is fine); one that
	// changes it is.
	p := newPlugin(allow())
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

// signers is a Signer getter holding the Signers of the signer names
// given.
type signers map[string]bool

func (s signers) Get(_ context.Context, name string) (*certificates.Signer, error) {
	if !s[name] {
		return nil, apierrors.NewNotFound(certificates.Resource("signers"), name)
	}
	return &certificates.Signer{ObjectMeta: metav1.ObjectMeta{Name: name}}, nil
}

// creds lists fixed RotatingCredentials, or fails.
type creds struct {
	list []*rotation.RotatingCredential
	err  error
}

func (c creds) List(_ context.Context, namespace string) ([]*rotation.RotatingCredential, error) {
	var out []*rotation.RotatingCredential
	for _, rc := range c.list {
		if rc.Namespace == namespace {
			out = append(out, rc)
		}
	}
	return out, c.err
}

// newPlugin is an initialized plugin whose Signers serve example.com/team
// and whose namespace "team" holds RotatingCredential "db-old" on Secret
// "db-old".
func newPlugin(a authorizer.Authorizer) *Plugin {
	p := New()
	p.SetAuthorizer(a)
	p.SetSigners(signers{"example.com:team": true})
	p.SetRotatingCredentialLister(creds{list: []*rotation.RotatingCredential{{
		ObjectMeta: metav1.ObjectMeta{Name: "db-old", Namespace: "team"},
		Spec:       rotation.RotatingCredentialSpec{SecretRef: rotation.SecretReference{Name: "db-old"}},
	}}})
	return p
}

func withSecret(rc *rotation.RotatingCredential, secret string) *rotation.RotatingCredential {
	rc.Spec.SecretRef.Name = secret
	return rc
}

// Issue #32: what needs a lookup is refused at create with the field and
// what to do.
func TestRefusedAfterALookup(t *testing.T) {
	approve := allow("approve certificates.rekey.io/signers/ example.com/* ")
	random := rotation.Minter{Type: rotation.MinterRandom, Random: &rotation.RandomMinter{Key: "token", Length: 32}}
	cert := func(signer string) rotation.Minter {
		return rotation.Minter{Type: rotation.MinterClientCertificate, ClientCertificate: &rotation.ClientCertificateMinter{SignerName: signer, CommonName: "app"}}
	}
	for name, tc := range map[string]struct {
		rc   *rotation.RotatingCredential
		old  *rotation.RotatingCredential
		want string
	}{
		"a Secret another RotatingCredential keeps": {rc: withSecret(withMinter(random), "db-old"),
			want: `RotatingCredential.rotation.rekey.io "db" is invalid: spec.secretRef.name: Invalid value: "db-old": RotatingCredential db-old already keeps its credential in this Secret: two would overwrite each other's; name another Secret`},
		"a Secret of its own":      {rc: withSecret(withMinter(random), "db")},
		"an update on its Secret":  {rc: withSecret(withMinter(random), "db-old"), old: withSecret(withMinter(random), "db-old")},
		"a signer a Signer serves": {rc: withSecret(withMinter(cert("example.com/team")), "db")},
		"a signer no Signer serves": {rc: withSecret(withMinter(cert("example.com/nobody")), "db"),
			want: `RotatingCredential.rotation.rekey.io "db" is invalid: spec.minter.clientCertificate.signerName: Invalid value: "example.com/nobody": no Signer serves this signer name (no Signer "example.com:nobody"): create the Signer first; kubectl get signers lists those there are`},
	} {
		t.Run(name, func(t *testing.T) {
			err := newPlugin(approve).Validate(context.Background(), attrs(tc.rc, tc.old), nil)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !apierrors.IsInvalid(err) || err.Error() != tc.want {
				t.Fatalf("err %v\nwant Invalid: %s", err, tc.want)
			}
		})
	}
	t.Run("a lookup that fails lets the create through", func(t *testing.T) {
		p := newPlugin(approve)
		p.SetRotatingCredentialLister(creds{err: errors.New("storage is not ready yet")})
		if err := p.Validate(context.Background(), attrs(withSecret(withMinter(random), "db-old"), nil), nil); err != nil {
			t.Fatal(err)
		}
	})
}
