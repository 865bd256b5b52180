package signersigning

import (
	"context"
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

func csr(signer string, cert string) *certificates.CertificateSigningRequest {
	return &certificates.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "req"},
		Spec:       certificates.CertificateSigningRequestSpec{SignerName: signer},
		Status:     certificates.CertificateSigningRequestStatus{Certificate: []byte(cert)},
	}
}

func attrs(obj, old runtime.Object, subresource, userName string) admission.Attributes {
	return admission.NewAttributesRecord(obj, old, certificates.Kind("CertificateSigningRequest").WithVersion("v1alpha1"),
		"", "req", certificates.Resource("certificatesigningrequests").WithVersion("v1alpha1"), subresource,
		admission.Update, &metav1.UpdateOptions{}, false, &user.DefaultInfo{Name: userName})
}

func TestSignerSigning(t *testing.T) {
	grants := []admissiontest.Grant{
		{User: "exact", Verb: "sign", Name: "example.com/signer"},
		{User: "wildcard", Verb: "sign", Name: "example.com/*"},
		{User: "approver", Verb: "approve", Name: "example.com/signer"},
	}
	tests := map[string]struct {
		user        string
		signer      string
		oldCert     string
		newCert     string
		subresource string
		wantAllowed bool
		wantChecks  int
	}{
		"exact name allowed":               {user: "exact", signer: "example.com/signer", newCert: "c", subresource: "status", wantAllowed: true, wantChecks: 1},
		"exact name other signer denied":   {user: "exact", signer: "example.com/other", newCert: "c", subresource: "status", wantChecks: 2},
		"domain wildcard allowed":          {user: "wildcard", signer: "example.com/x", newCert: "c", subresource: "status", wantAllowed: true, wantChecks: 2},
		"domain wildcard other domain":     {user: "wildcard", signer: "example.org/x", newCert: "c", subresource: "status", wantChecks: 2},
		"approve permission does not sign": {user: "approver", signer: "example.com/signer", newCert: "c", subresource: "status", wantChecks: 2},
		"certificate unchanged: no check":  {user: "nobody", signer: "example.com/signer", oldCert: "c", newCert: "c", subresource: "status", wantAllowed: true},
		"no certificate: no check":         {user: "nobody", signer: "example.com/signer", subresource: "status", wantAllowed: true},
		"approval subresource not checked": {user: "nobody", signer: "example.com/signer", newCert: "c", subresource: "approval", wantAllowed: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			fake := &admissiontest.Authorizer{T: t, Grants: grants}
			p := New()
			p.SetAuthorizer(fake.Authorizer())
			err := p.Validate(context.Background(), attrs(csr(tc.signer, tc.newCert), csr(tc.signer, tc.oldCert), tc.subresource, tc.user), nil)
			if tc.wantAllowed && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tc.wantAllowed {
				if !apierrors.IsForbidden(err) {
					t.Fatalf("want Forbidden, got %v", err)
				}
				for _, want := range []string{`"sign"`, `"signers"`, tc.signer} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("message %q does not name %s", err, want)
					}
				}
			}
			if len(fake.Calls) != tc.wantChecks {
				t.Errorf("%d authorization checks, want %d", len(fake.Calls), tc.wantChecks)
			}
		})
	}
}
