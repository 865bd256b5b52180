// Package caauthz builds the one authorization question rekey's admission
// plugins ask about a CertificateAuthority: may this user perform a verb
// on it (or on one of its subresources) by name. The plugins differ in the
// verb and in what a refusal says, not in the question.
package caauthz

import (
	"context"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"rekey.io/rekey/pkg/apis/rotation"
)

// SubresourceSignJWT is the subresource whose create signs service-account
// tokens; adding a legacy token key or naming a CA in a jwt-signer's
// TrustConsumer needs the same right.
const SubresourceSignJWT = "signjwt"

// Authorize asks whether u may perform verb on the CertificateAuthority
// named ca (its subresource, when not empty), in any version of the group.
func Authorize(ctx context.Context, authz authorizer.Authorizer, u user.Info, verb, subresource, ca string) (authorizer.Decision, error) {
	decision, _, err := authz.Authorize(ctx, authorizer.AttributesRecord{
		User:            u,
		Verb:            verb,
		APIGroup:        rotation.GroupName,
		APIVersion:      "*",
		Resource:        "certificateauthorities",
		Subresource:     subresource,
		Name:            ca,
		ResourceRequest: true,
	})
	return decision, err
}
