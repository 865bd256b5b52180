package standalone

import (
	"fmt"
	"io"
	"net/http"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// Paths of the two reviews a standalone server answers itself; in a
// cluster, kube-apiserver answers them.
const (
	SelfSubjectReviewPath       = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
	SelfSubjectAccessReviewPath = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
	SelfSubjectRulesReviewPath  = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews"
)

// maxReviewBytes bounds a review's body: a SelfSubjectAccessReview is a few
// hundred bytes.
const maxReviewBytes = 64 << 10

// reviews holds the scheme and codecs of the two review types.
type reviews struct {
	scheme *runtime.Scheme
	codecs runtime.NegotiatedSerializer
}

func newReviews() (*reviews, error) {
	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	for _, add := range []func(*runtime.Scheme) error{authenticationv1.AddToScheme, authorizationv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, fmt.Errorf("registering the review types: %w", err)
		}
	}
	return &reviews{scheme: scheme, codecs: serializer.NewCodecFactory(scheme).WithoutConversion()}, nil
}

// Mux is where InstallSelfReviews registers its handlers: the generic
// server's NonGoRestfulMux.
type Mux interface {
	Handle(path string, handler http.Handler)
}

// InstallSelfReviews serves SelfSubjectReview (`kubectl auth whoami`) and
// SelfSubjectAccessReview (`kubectl auth can-i`) and SelfSubjectRulesReview
// (`kubectl auth can-i --list`, the rules of NewAuthorizer) as kube-apiserver does,
// answered with authz, the standalone authorizer. The handler chain has
// authenticated the request and authorized the create of the review itself
// (NewAuthorizer allows it to every authenticated user, as kube-apiserver's
// system:basic-user role does). They are not listed in discovery: kubectl
// calls them by path.
func InstallSelfReviews(mux Mux, authz authorizer.Authorizer) error {
	rv, err := newReviews()
	if err != nil {
		return err
	}
	_, rulesAuthz := authz.(standaloneAuthorizer)
	mux.Handle(SelfSubjectReviewPath, rv.handler(authenticationv1.SchemeGroupVersion.WithResource("selfsubjectreviews"),
		func() runtime.Object { return &authenticationv1.SelfSubjectReview{} },
		func(r *http.Request, u user.Info, obj runtime.Object) error {
			review := obj.(*authenticationv1.SelfSubjectReview)
			review.Status.UserInfo = authenticationv1.UserInfo{Username: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups()}
			if extra := u.GetExtra(); len(extra) > 0 {
				review.Status.UserInfo.Extra = map[string]authenticationv1.ExtraValue{}
				for k, v := range extra {
					review.Status.UserInfo.Extra[k] = v
				}
			}
			return nil
		}))
	mux.Handle(SelfSubjectAccessReviewPath, rv.handler(authorizationv1.SchemeGroupVersion.WithResource("selfsubjectaccessreviews"),
		func() runtime.Object { return &authorizationv1.SelfSubjectAccessReview{} },
		func(r *http.Request, u user.Info, obj runtime.Object) error {
			review := obj.(*authorizationv1.SelfSubjectAccessReview)
			attrs, err := accessReviewAttributes(u, review.Spec)
			if err != nil {
				return err
			}
			decision, reason, err := authz.Authorize(r.Context(), attrs)
			review.Status = authorizationv1.SubjectAccessReviewStatus{
				Allowed: decision == authorizer.DecisionAllow,
				Denied:  decision == authorizer.DecisionDeny,
				Reason:  reason,
			}
			if err != nil {
				review.Status.EvaluationError = err.Error()
			}
			return nil
		}))
	// The rules are those of the standalone policy, which is the same in
	// every namespace; with another authorizer, nothing can list them.
	mux.Handle(SelfSubjectRulesReviewPath, rv.handler(authorizationv1.SchemeGroupVersion.WithResource("selfsubjectrulesreviews"),
		func() runtime.Object { return &authorizationv1.SelfSubjectRulesReview{} },
		func(_ *http.Request, u user.Info, obj runtime.Object) error {
			review := obj.(*authorizationv1.SelfSubjectRulesReview)
			review.Status = authorizationv1.SubjectRulesReviewStatus{Incomplete: true, EvaluationError: "rules are listed only for rekey's standalone authorizer"}
			if rulesAuthz {
				review.Status.ResourceRules, review.Status.NonResourceRules = rulesFor(u)
				review.Status.Incomplete, review.Status.EvaluationError = false, ""
			}
			return nil
		}))
	return nil
}

// accessReviewAttributes are the attributes a SelfSubjectAccessReview asks
// about, for the requesting user, as kube-apiserver builds them
// (pkg/registry/authorization/util).
func accessReviewAttributes(u user.Info, spec authorizationv1.SelfSubjectAccessReviewSpec) (authorizer.Attributes, error) {
	switch r, n := spec.ResourceAttributes, spec.NonResourceAttributes; {
	case r != nil && n != nil:
		return nil, fmt.Errorf("spec: resourceAttributes and nonResourceAttributes are mutually exclusive")
	case r != nil:
		return authorizer.AttributesRecord{
			User: u, Verb: r.Verb, Namespace: r.Namespace, APIGroup: r.Group, APIVersion: r.Version,
			Resource: r.Resource, Subresource: r.Subresource, Name: r.Name, ResourceRequest: true,
		}, nil
	case n != nil:
		return authorizer.AttributesRecord{User: u, Verb: n.Verb, Path: n.Path}, nil
	default:
		return nil, fmt.Errorf("spec: exactly one of resourceAttributes or nonResourceAttributes is required")
	}
}

// handler answers a POST of a review with the review, its status
// filled by fill for the authenticated user, in the content type the
// client asked for.
func (rv *reviews) handler(gvr schema.GroupVersionResource, newObj func() runtime.Object, fill func(*http.Request, user.Info, runtime.Object) error) http.Handler {
	gv := gvr.GroupVersion()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fail := func(err error) {
			responsewriters.ErrorNegotiated(err, rv.codecs, gv, w, r)
		}
		if r.Method != http.MethodPost {
			fail(apierrors.NewMethodNotSupported(gvr.GroupResource(), r.Method))
			return
		}
		u, ok := request.UserFrom(r.Context())
		if !ok {
			fail(apierrors.NewUnauthorized("no user"))
			return
		}
		info, err := negotiation.NegotiateInputSerializer(r, false, rv.codecs)
		if err != nil {
			fail(err)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxReviewBytes+1))
		if err != nil {
			fail(apierrors.NewBadRequest(fmt.Sprintf("reading the request body: %v", err)))
			return
		}
		if len(body) > maxReviewBytes {
			fail(apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("limit is %d bytes", maxReviewBytes)))
			return
		}
		obj := newObj()
		if len(body) > 0 {
			kind := gv.WithKind(rv.kindOf(obj))
			if _, _, err := rv.codecs.DecoderToVersion(info.Serializer, gv).Decode(body, &kind, obj); err != nil {
				fail(apierrors.NewBadRequest(fmt.Sprintf("decoding the review: %v", err)))
				return
			}
		}
		if err := fill(r, u, obj); err != nil {
			fail(apierrors.NewBadRequest(err.Error()))
			return
		}
		if m, ok := obj.(metav1.Object); ok {
			m.SetCreationTimestamp(metav1.Now())
		}
		responsewriters.WriteObjectNegotiated(rv.codecs, negotiation.DefaultEndpointRestrictions, gv, w, r, http.StatusCreated, obj, false)
	})
}

func (rv *reviews) kindOf(obj runtime.Object) string {
	kinds, _, err := rv.scheme.ObjectKinds(obj)
	if err != nil || len(kinds) == 0 {
		return ""
	}
	return kinds[0].Kind
}
