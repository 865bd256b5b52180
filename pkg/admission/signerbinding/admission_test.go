package signerbinding

import (
	"context"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"rekey.io/rekey/pkg/admission/admissiontest"
	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/pkg/apis/rotation"
)

func signer(name, ca string) *certificates.Signer {
	return &certificates.Signer{
		ObjectMeta: metav1.ObjectMeta{Name: strings.Replace(name, "/", ":", 1)},
		Spec:       certificates.SignerSpec{SignerName: name, CertificateAuthorityRef: certificates.CertificateAuthorityReference{Name: ca}},
	}
}

func attrs(s *certificates.Signer, op admission.Operation, subresource, userName string) admission.Attributes {
	return admission.NewAttributesRecord(s, nil, certificates.Kind("Signer").WithVersion("v1alpha1"),
		"", s.Name, certificates.Resource("signers").WithVersion("v1alpha1"), subresource,
		op, nil, false, &user.DefaultInfo{Name: userName})
}

// TestSignerBinding covers the escalation: a user who may serve their own
// domain binds a Signer to the CA kube-apiserver trusts for clients.
func TestSignerBinding(t *testing.T) {
	grants := []admissiontest.Grant{
		{User: "team", Verb: "sign", Name: "team.example.com/*"},
		{User: "team", Verb: "use", Name: "team-ca", Resource: "certificateauthorities"},
		{User: "ca-user", Verb: "use", Name: "team-ca", Resource: "certificateauthorities"},
		{User: "admin", Verb: "sign", Name: "rekey.io/*"},
		{User: "admin", Verb: "use", Name: "rekey.io-kube-apiserver-client", Resource: "certificateauthorities"},
	}
	tests := map[string]struct {
		user, signerName, ca string
		op                   admission.Operation
		subresource          string
		wantErr              string
	}{
		"own domain, own CA":                {user: "team", signerName: "team.example.com/app", ca: "team-ca", op: admission.Create},
		"own domain, cluster client CA":     {user: "team", signerName: "team.example.com/app", ca: "rekey.io-kube-apiserver-client", op: admission.Create, wantErr: `needs verb "use" on resource "certificateauthorities" in group "rotation.rekey.io" with resourceName "rekey.io-kube-apiserver-client"`},
		"update to the cluster client CA":   {user: "team", signerName: "team.example.com/app", ca: "rekey.io-kube-apiserver-client", op: admission.Update, wantErr: `needs verb "use"`},
		"someone else's signer name":        {user: "team", signerName: "other.example.com/app", ca: "team-ca", op: admission.Create, wantErr: `needs verb "sign"`},
		"CA permission alone is not enough": {user: "ca-user", signerName: "team.example.com/app", ca: "team-ca", op: admission.Create, wantErr: `needs verb "sign"`},
		"granted by an admin":               {user: "admin", signerName: "rekey.io/custom", ca: "rekey.io-kube-apiserver-client", op: admission.Create},
		"status is not this plugin's":       {user: "nobody", signerName: "team.example.com/app", ca: "rekey.io-kube-apiserver-client", op: admission.Update, subresource: "status"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			fake := &admissiontest.Authorizer{T: t, Grants: grants}
			p := New()
			p.SetAuthorizer(fake.Authorizer())
			p.SetCertificateAuthorities(cas{})
			if err := p.ValidateInitialization(); err != nil {
				t.Fatal(err)
			}
			err := p.Validate(context.Background(), attrs(signer(tc.signerName, tc.ca), tc.op, tc.subresource, tc.user), nil)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error = %v, want Forbidden containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestAuthorizerErrorDenies(t *testing.T) {
	fake := &admissiontest.Authorizer{T: t, Err: errors.New("webhook down")}
	p := New()
	p.SetAuthorizer(fake.Authorizer())
	err := p.Validate(context.Background(), attrs(signer("team.example.com/app", "team-ca"), admission.Create, "", "team"), nil)
	if !apierrors.IsForbidden(err) {
		t.Fatalf("error = %v, want Forbidden", err)
	}
}

func TestRequiresAuthorizer(t *testing.T) {
	if err := New().ValidateInitialization(); err == nil {
		t.Fatal("initialized without an authorizer")
	}
}

// cas holds the CertificateAuthorities the tests read by name.
type cas map[string]*rotation.CertificateAuthority

func (c cas) Get(_ context.Context, name string) (*rotation.CertificateAuthority, error) {
	if ca, ok := c[name]; ok {
		return ca, nil
	}
	return nil, apierrors.NewNotFound(rotation.Resource("certificateauthorities"), name)
}

// TestDeletingASignerThatPublishesNeedsDeleteOnItsBundle: rekey deletes
// the ClusterTrustBundle of a Signer that is gone when its CA publishes
// them, so deleting such a Signer needs delete on clustertrustbundles;
// other deletes need nothing beyond the delete itself.
func TestDeletingASignerThatPublishesNeedsDeleteOnItsBundle(t *testing.T) {
	known := cas{
		"publishes": {ObjectMeta: metav1.ObjectMeta{Name: "publishes"}, Spec: rotation.CertificateAuthoritySpec{Publish: &rotation.Publish{ClusterTrustBundle: true}}},
		"quiet":     {ObjectMeta: metav1.ObjectMeta{Name: "quiet"}},
	}
	for name, tc := range map[string]struct {
		ca      string
		mayCTB  bool
		refused bool
	}{
		"CA publishes, no delete on bundles":  {ca: "publishes", refused: true},
		"CA publishes, delete on bundles":     {ca: "publishes", mayCTB: true},
		"CA publishes no ClusterTrustBundles": {ca: "quiet"},
		"CA gone":                             {ca: "gone"},
	} {
		t.Run(name, func(t *testing.T) {
			p := New()
			p.SetAuthorizer(authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
				if tc.mayCTB && a.GetVerb() == "delete" && a.GetResource() == "clustertrustbundles" && a.GetAPIGroup() == "certificates.k8s.io" {
					return authorizer.DecisionAllow, "", nil
				}
				return authorizer.DecisionNoOpinion, "", nil
			}))
			p.SetCertificateAuthorities(known)
			s := signer("team.example.com/app", tc.ca)
			a := admission.NewAttributesRecord(nil, s, certificates.Kind("Signer").WithVersion("v1alpha1"), "", s.Name,
				certificates.Resource("signers").WithVersion("v1alpha1"), "", admission.Delete, nil, false, &user.DefaultInfo{Name: "team"})
			err := p.Validate(context.Background(), a, nil)
			if tc.refused != (err != nil) {
				t.Fatalf("refused = %v (%v), want %v", err != nil, err, tc.refused)
			}
			if tc.refused && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "delete on clustertrustbundles")) {
				t.Fatalf("got %v, want Forbidden naming delete on clustertrustbundles", err)
			}
		})
	}
}
