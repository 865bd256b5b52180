package signerapproval

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

	"rekey.io/rekey/pkg/admission/admissiontest"
	"rekey.io/rekey/pkg/apis/certificates"
)

func csr(signer string) *certificates.CertificateSigningRequest {
	return &certificates.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "req"},
		Spec:       certificates.CertificateSigningRequestSpec{SignerName: signer},
	}
}

func attrs(obj, old runtime.Object, subresource, userName string) admission.Attributes {
	return admission.NewAttributesRecord(obj, old, certificates.Kind("CertificateSigningRequest").WithVersion("v1alpha1"),
		"", "req", certificates.Resource("certificatesigningrequests").WithVersion("v1alpha1"), subresource,
		admission.Update, &metav1.UpdateOptions{}, false, &user.DefaultInfo{Name: userName})
}

func TestSignerApproval(t *testing.T) {
	grants := []admissiontest.Grant{
		{User: "exact", Verb: "approve", Name: "example.com/signer"},
		{User: "wildcard", Verb: "approve", Name: "example.com/*"},
		{User: "signer-only", Verb: "sign", Name: "example.com/signer"},
	}
	tests := map[string]struct {
		user        string
		oldSigner   string
		newSigner   string
		subresource string
		wantAllowed bool
		wantChecks  int
	}{
		"exact name allowed":               {user: "exact", oldSigner: "example.com/signer", subresource: "approval", wantAllowed: true, wantChecks: 1},
		"exact name other signer denied":   {user: "exact", oldSigner: "example.com/other", subresource: "approval", wantChecks: 2},
		"domain wildcard allowed":          {user: "wildcard", oldSigner: "example.com/anything", subresource: "approval", wantAllowed: true, wantChecks: 2},
		"domain wildcard other domain":     {user: "wildcard", oldSigner: "example.org/signer", subresource: "approval", wantChecks: 2},
		"sign permission does not approve": {user: "signer-only", oldSigner: "example.com/signer", subresource: "approval", wantChecks: 2},
		"nobody denied":                    {user: "nobody", oldSigner: "example.com/signer", subresource: "approval", wantChecks: 2},
		"old object decides, not the body": {user: "exact", oldSigner: "evil.com/signer", newSigner: "example.com/signer", subresource: "approval", wantChecks: 2},
		"status subresource not checked":   {user: "nobody", oldSigner: "example.com/signer", subresource: "status", wantAllowed: true},
		"main resource not checked":        {user: "nobody", oldSigner: "example.com/signer", subresource: "", wantAllowed: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			fake := &admissiontest.Authorizer{T: t, Grants: grants}
			p := New()
			p.SetAuthorizer(fake.Authorizer())
			if err := p.ValidateInitialization(); err != nil {
				t.Fatal(err)
			}
			newSigner := tc.newSigner
			if newSigner == "" {
				newSigner = tc.oldSigner
			}
			err := p.Validate(context.Background(), attrs(csr(newSigner), csr(tc.oldSigner), tc.subresource, tc.user), nil)
			if tc.wantAllowed && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tc.wantAllowed {
				if !apierrors.IsForbidden(err) {
					t.Fatalf("want Forbidden, got %v", err)
				}
				msg := err.Error()
				for _, want := range []string{`"approve"`, `"signers"`, tc.oldSigner} {
					if !strings.Contains(msg, want) {
						t.Errorf("message %q does not name %s", msg, want)
					}
				}
			}
			if len(fake.Calls) != tc.wantChecks {
				t.Errorf("%d authorization checks, want %d", len(fake.Calls), tc.wantChecks)
			}
		})
	}
}

func TestSignerApprovalFailsClosedOnAuthorizerError(t *testing.T) {
	fake := &admissiontest.Authorizer{T: t, Err: errors.New("webhook down")}
	p := New()
	p.SetAuthorizer(fake.Authorizer())
	err := p.Validate(context.Background(), attrs(csr("example.com/s"), csr("example.com/s"), "approval", "exact"), nil)
	if !apierrors.IsForbidden(err) {
		t.Fatalf("want Forbidden when the authorizer fails, got %v", err)
	}
}

func TestSignerApprovalNeedsAuthorizer(t *testing.T) {
	if err := New().ValidateInitialization(); err == nil {
		t.Fatal("plugin without authorizer initialized")
	}
}
