package signerrevocation

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"rekey.io/rekey/pkg/admission/admissiontest"
	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/pkg/serveridentity"
)

func attrs(signer string, u user.Info) admission.Attributes {
	rev := &certificates.Revocation{
		ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("ab", 32)},
		// The client's spec says nothing of the signer; status is the
		// server's.
		Status: certificates.RevocationStatus{SignerName: signer},
	}
	return admission.NewAttributesRecord(rev, nil, certificates.Kind("Revocation").WithVersion("v1alpha1"),
		"", "", certificates.Resource("revocations").WithVersion("v1alpha1"), "",
		admission.Create, &metav1.CreateOptions{}, false, u)
}

func TestSignerRevocation(t *testing.T) {
	grants := []admissiontest.Grant{
		{User: "exact", Verb: "revoke", Name: "example.com/users"},
		{User: "wildcard", Verb: "revoke", Name: "example.com/*"},
		{User: "signer", Verb: "sign", Name: "example.com/users"},
		{User: "approver", Verb: "approve", Name: "example.com/users"},
	}
	controllers := serveridentity.UserName
	tests := map[string]struct {
		user, signer string
		wantAllowed  bool
	}{
		"exact name":                    {user: "exact", signer: "example.com/users", wantAllowed: true},
		"exact name, another signer":    {user: "exact", signer: "example.com/other"},
		"domain wildcard":               {user: "wildcard", signer: "example.com/anything", wantAllowed: true},
		"domain wildcard, other domain": {user: "wildcard", signer: "example.org/users"},
		"sign does not revoke":          {user: "signer", signer: "example.com/users"},
		"approve does not revoke":       {user: "approver", signer: "example.com/users"},
		"nobody":                        {user: "nobody", signer: "example.com/users"},
		"unresolved signer":             {user: "wildcard", signer: ""},
		"controllers":                   {user: controllers, signer: "example.com/users", wantAllowed: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			fake := &admissiontest.Authorizer{T: t, Grants: grants}
			p := New()
			p.SetAuthorizer(fake.Authorizer())
			if err := p.ValidateInitialization(); err != nil {
				t.Fatal(err)
			}
			var u user.Info = &user.DefaultInfo{Name: tc.user}
			if tc.user == controllers {
				id, err := serveridentity.New()
				if err != nil {
					t.Fatal(err)
				}
				u, _ = genericapirequest.UserFrom(id.WithUser(context.Background()))
			}
			a := attrs(tc.signer, u)
			if !p.Handles(a.GetOperation()) {
				t.Fatal("the plugin does not handle create")
			}
			err := p.Validate(context.Background(), a, nil)
			if tc.wantAllowed != (err == nil) {
				t.Fatalf("allowed=%v, want %v (err %v)", err == nil, tc.wantAllowed, err)
			}
			if err != nil && !apierrors.IsForbidden(err) {
				t.Fatalf("not Forbidden: %v", err)
			}
			if err != nil && tc.signer != "" && !strings.Contains(err.Error(), `needs verb "revoke" on resource "signers" in group "certificates.rekey.io" with resourceName "`+tc.signer+`"`) {
				t.Fatalf("message does not say what is missing: %v", err)
			}
		})
	}
}

func TestOtherResourcesAreNotChecked(t *testing.T) {
	p := New()
	p.SetAuthorizer((&admissiontest.Authorizer{T: t}).Authorizer())
	a := admission.NewAttributesRecord(&certificates.Signer{}, nil, certificates.Kind("Signer").WithVersion("v1alpha1"),
		"", "x", certificates.Resource("signers").WithVersion("v1alpha1"), "", admission.Create, &metav1.CreateOptions{}, false, &user.DefaultInfo{Name: "u"})
	if err := p.Validate(context.Background(), a, nil); err != nil {
		t.Fatal(err)
	}
}
