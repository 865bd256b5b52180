// Package nodeclientauthz authorizes the NodeClient create paths
// (certificatesigningrequests/NAME/nodeclient and /selfnodeclient) that
// kube-apiserver's aggregator forwards, in a way the delegated
// authorizer's cache can answer.
//
// rekey authorizes every request again, after kube-apiserver, by asking
// the cluster (a SubjectAccessReview, cached for a few seconds by the
// attributes asked). A create through these paths names the request to be
// created, so the attributes differ for every node, and a bootstrap burst
// of thousands of nodes sharing one bootstrap token asked the cluster once
// per node, although the answer depends on the permission alone: RBAC
// grants "create certificatesigningrequests/nodeclient" to a group, not
// per name.
//
// For such a create that came through the front proxy, the second check
// asks about the permission for any name first ("create
// certificatesigningrequests/nodeclient", no name). That question is the
// same for every node of one bootstrap identity, so the cache answers it.
// If it is allowed, the request is; otherwise the named question is asked,
// as before (a grant restricted to names is honoured, a denial is final).
//
// Why this is no weaker: kube-apiserver authorized the named request
// before forwarding it (the aggregator proxies only authorized requests),
// with the same authorizers the review asks. The second check, as before,
// refuses a requester whom the cluster does not grant the permission. And
// for RBAC a grant for any name covers every name. Requests that did not
// come through the front proxy (clients calling rekey directly) are
// authorized with their name, as every other request is.
package nodeclientauthz

import (
	"context"

	"k8s.io/apiserver/pkg/authorization/authorizer"

	"rekey.io/rekey/pkg/issuer"
)

// Authorizer wraps the delegated authorizer.
type Authorizer struct {
	// Delegate answers every question.
	Delegate authorizer.Authorizer
	// Group is the API group of the certificate signing requests.
	Group string
	// ViaFrontProxy says whether the front proxy authenticated the
	// request of ctx.
	ViaFrontProxy func(ctx context.Context) bool
}

// Authorize implements authorizer.Authorizer.
func (a *Authorizer) Authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	if a.applies(ctx, attrs) {
		decision, reason, err := a.Delegate.Authorize(ctx, anyName{attrs})
		if err == nil && decision == authorizer.DecisionAllow {
			return decision, reason, nil
		}
	}
	return a.Delegate.Authorize(ctx, attrs)
}

// ConditionsAwareAuthorize implements authorizer.Authorizer: the same,
// where only an unconditional allow for any name answers early.
func (a *Authorizer) ConditionsAwareAuthorize(ctx context.Context, attrs authorizer.Attributes) authorizer.ConditionsAwareDecision {
	if a.applies(ctx, attrs) {
		if d := a.Delegate.ConditionsAwareAuthorize(ctx, anyName{attrs}); d.IsAllow() && d.Error() == nil {
			return d
		}
	}
	return a.Delegate.ConditionsAwareAuthorize(ctx, attrs)
}

// EvaluateConditions implements authorizer.Authorizer.
func (a *Authorizer) EvaluateConditions(ctx context.Context, decision authorizer.ConditionsAwareDecision, data authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return a.Delegate.EvaluateConditions(ctx, decision, data)
}

func (a *Authorizer) applies(ctx context.Context, attrs authorizer.Attributes) bool {
	return attrs.IsResourceRequest() &&
		attrs.GetVerb() == "create" &&
		attrs.GetAPIGroup() == a.Group &&
		attrs.GetResource() == "certificatesigningrequests" &&
		(attrs.GetSubresource() == issuer.SubresourceNodeClient || attrs.GetSubresource() == issuer.SubresourceSelfNodeClient) &&
		attrs.GetName() != "" &&
		a.ViaFrontProxy(ctx)
}

// anyName asks about the same request for any name.
type anyName struct{ authorizer.Attributes }

func (anyName) GetName() string { return "" }
