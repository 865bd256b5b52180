package requestnames

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/pkg/serveridentity"
)

func TestReservedRequestNames(t *testing.T) {
	id, err := serveridentity.New()
	if err != nil {
		t.Fatal(err)
	}
	controllers, _ := genericapirequest.UserFrom(id.WithUser(context.Background()))
	bob := &user.DefaultInfo{Name: "bob"}
	// A client may present the controllers' name and groups (a client
	// certificate, impersonation): only the identity's own type counts.
	lookalike := &user.DefaultInfo{Name: serveridentity.UserName, Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated}}
	for name, tc := range map[string]struct {
		user         user.Info
		name, prefix string
		subresource  string
		allowed      bool
	}{
		"a user planting a RotatingCredential's request":         {user: bob, name: "rcred.team.db.g2"},
		"a user planting one through a subresource that creates": {user: bob, name: "rcred.team.db.g2", subresource: "selfnodeclient"},
		"a user's generateName expanding to a reserved name":     {user: bob, prefix: "rcred.team.db.g"},
		"a user presenting the controllers' name and groups":     {user: lookalike, name: "rcred.team.db.g2"},
		"no user":                          {name: "rcred.team.db.g2"},
		"rekey's controllers":              {user: controllers, name: "rcred.team.db.g2", allowed: true},
		"a user's request of another name": {user: bob, name: "rcredit.team", allowed: true},
		"a name with the prefix inside":    {user: bob, name: "team.rcred.db", allowed: true},
	} {
		t.Run(name, func(t *testing.T) {
			obj := &certificates.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: tc.name, GenerateName: tc.prefix}}
			if tc.prefix != "" {
				obj.Name = tc.prefix + "x7k2q" // as the registry generates it before validation
			}
			a := admission.NewAttributesRecord(obj, nil, certificates.Kind("CertificateSigningRequest").WithVersion("v1alpha1"),
				"", tc.name, certificates.Resource("certificatesigningrequests").WithVersion("v1alpha1"), tc.subresource,
				admission.Create, &metav1.CreateOptions{}, false, tc.user)
			err := New().Validate(context.Background(), a, nil)
			if tc.allowed && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tc.allowed && !apierrors.IsForbidden(err) {
				t.Fatalf("want Forbidden, got %v", err)
			}
		})
	}
}

// Other resources, and updates of existing requests, are not this
// plugin's business.
func TestOnlyRequestCreates(t *testing.T) {
	if New().Handles(admission.Update) || New().Handles(admission.Delete) {
		t.Fatal("handles more than create")
	}
	a := admission.NewAttributesRecord(&certificates.Signer{ObjectMeta: metav1.ObjectMeta{Name: "rcred.x"}}, nil, certificates.Kind("Signer").WithVersion("v1alpha1"),
		"", "rcred.x", certificates.Resource("signers").WithVersion("v1alpha1"), "", admission.Create, &metav1.CreateOptions{}, false, &user.DefaultInfo{Name: "bob"})
	if err := New().Validate(context.Background(), a, nil); err != nil {
		t.Fatal(err)
	}
}
