// Package signerauthz answers one question: may this user perform a verb
// ("approve" or "sign") for a signer? The signer is a synthetic resource
// "signers" in group certificates.rekey.io whose name is the signer name, or
// "<domain>/*" for every signer of a domain (seed 003). The admission plugins
// and the synchronous issuer both ask it, so it sits below both. CheckIn
// asks the same of the host cluster's group certificates.k8s.io.
package signerauthz

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

const (
	// Group is the API group the synthetic signers resource belongs to.
	Group = "certificates.rekey.io"
	// HostGroup is the group of the host cluster's own synthetic signers
	// resource, which kube-apiserver checks for its certificates.k8s.io
	// requests: same resource, same verbs, same "<domain>/*" wildcard.
	HostGroup = "certificates.k8s.io"
	// Resource is the synthetic resource that names signers.
	Resource = "signers"

	// VerbApprove is needed to add Approved or Denied through /approval.
	VerbApprove = "approve"
	// VerbSign is needed to set status.certificate through /status.
	VerbSign = "sign"
	// VerbRevoke is needed to create a Revocation of a certificate the
	// signer issued.
	VerbRevoke = "revoke"
)

// Decision is the outcome of a signer check.
type Decision struct {
	Allowed bool
	// Err is set when the authorizer itself failed; the request must then be
	// refused, never let through.
	Err error
}

// Check asks the authorizer for verb on the exact signer name first and on
// "<domain>/*" second, in rekey's group. Any error from the authorizer
// denies.
func Check(ctx context.Context, authz authorizer.Authorizer, u user.Info, verb, signerName string) Decision {
	return CheckIn(ctx, authz, Group, u, verb, signerName)
}

// CheckIn is Check for the signers resource of another group (HostGroup:
// what kube-apiserver asks before a certificates.k8s.io approval or
// signature).
func CheckIn(ctx context.Context, authz authorizer.Authorizer, group string, u user.Info, verb, signerName string) Decision {
	var lastErr error
	for _, name := range candidateNames(signerName) {
		decision, _, err := authz.Authorize(ctx, attributes(group, u, verb, name))
		if err != nil {
			lastErr = err
			continue
		}
		if decision == authorizer.DecisionAllow {
			return Decision{Allowed: true}
		}
	}
	return Decision{Err: lastErr}
}

func candidateNames(signerName string) []string {
	names := []string{signerName}
	if domain, _, ok := strings.Cut(signerName, "/"); ok && domain != "" {
		names = append(names, domain+"/*")
	}
	return names
}

func attributes(group string, u user.Info, verb, name string) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{
		User:            u,
		Verb:            verb,
		Name:            name,
		APIGroup:        group,
		APIVersion:      "*",
		Resource:        Resource,
		ResourceRequest: true,
	}
}

// ForbiddenMessage names the verb, resource and signer the user lacks, so
// that an operator can write the missing RBAC rule from the error alone.
func ForbiddenMessage(u user.Info, verb, signerName string) string {
	return ForbiddenMessageIn(Group, u, verb, signerName)
}

// ForbiddenMessageIn is ForbiddenMessage for the signers resource of group.
func ForbiddenMessageIn(group string, u user.Info, verb, signerName string) string {
	names := candidateNames(signerName)
	return fmt.Sprintf("user %q may not %s requests for signer %q: needs verb %q on resource %q in group %q with resourceName %s",
		u.GetName(), verb, signerName, verb, Resource, group, quoteJoin(names))
}

func quoteJoin(names []string) string {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(quoted, " or ")
}
