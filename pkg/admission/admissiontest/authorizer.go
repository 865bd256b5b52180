// Package admissiontest has fakes for admission plugin tests.
package admissiontest

import (
	"context"
	"fmt"
	"testing"

	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// Grant is one permission the fake authorizer allows: on the synthetic
// resource "signers" unless Resource says "certificateauthorities"; of
// group certificates.rekey.io (signers) or rotation.rekey.io (CAs) unless
// Group says "certificates.k8s.io" (the host cluster's signers); of no
// subresource unless Subresource names one (it must then match exactly).
type Grant struct {
	User, Verb, Name string
	Resource         string
	Subresource      string
	Group            string
}

// Authorizer allows exactly the grants it holds on resource "signers" in
// group certificates.rekey.io or certificates.k8s.io and
// "certificateauthorities" in group rotation.rekey.io, fails the test on
// any other resource, and records every call.
type Authorizer struct {
	T      testing.TB
	Grants []Grant
	// Err, when set, is returned by every call.
	Err   error
	Calls []authorizer.Attributes
}

// Authorizer returns the fake as an authorizer.Authorizer.
func (f *Authorizer) Authorizer() authorizer.Authorizer {
	return authorizer.AuthorizerFunc(f.authorize)
}

func (f *Authorizer) authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	f.Calls = append(f.Calls, a)
	signers := (a.GetAPIGroup() == "certificates.rekey.io" || a.GetAPIGroup() == "certificates.k8s.io") && a.GetResource() == "signers"
	cas := a.GetAPIGroup() == "rotation.rekey.io" && a.GetResource() == "certificateauthorities"
	if !signers && !cas || !a.IsResourceRequest() {
		f.T.Errorf("unexpected authorization check: group=%q resource=%q", a.GetAPIGroup(), a.GetResource())
		return authorizer.DecisionDeny, "unexpected", nil
	}
	if f.Err != nil {
		return authorizer.DecisionNoOpinion, "", f.Err
	}
	for _, g := range f.Grants {
		resource, group := g.Resource, g.Group
		if resource == "" {
			resource = "signers"
		}
		if group == "" {
			group = "certificates.rekey.io"
			if resource == "certificateauthorities" {
				group = "rotation.rekey.io"
			}
		}
		if g.User == a.GetUser().GetName() && g.Verb == a.GetVerb() && g.Name == a.GetName() && resource == a.GetResource() && g.Subresource == a.GetSubresource() && group == a.GetAPIGroup() {
			return authorizer.DecisionAllow, "", nil
		}
	}
	return authorizer.DecisionNoOpinion, fmt.Sprintf("no grant for %s %s %s", a.GetUser().GetName(), a.GetVerb(), a.GetName()), nil
}
