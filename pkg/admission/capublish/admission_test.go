package capublish

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"rekey.io/rekey/pkg/apis/rotation"
)

// allow grants create on configmaps in the listed namespaces ("" for all)
// and, if ctb, on clustertrustbundles.
func allow(namespaces map[string]bool, ctb bool) authorizer.Authorizer {
	return authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		switch {
		case a.GetVerb() != "create":
		case a.GetResource() == "configmaps" && a.GetAPIGroup() == "" && (namespaces[a.GetNamespace()] || namespaces[""]):
			return authorizer.DecisionAllow, "", nil
		case a.GetResource() == "clustertrustbundles" && a.GetAPIGroup() == "certificates.k8s.io" && ctb:
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionNoOpinion, "", nil
	})
}

func ca(p *rotation.Publish) *rotation.CertificateAuthority {
	return &rotation.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "ca"}, Spec: rotation.CertificateAuthoritySpec{Publish: p}}
}

func attrs(obj, old *rotation.CertificateAuthority) admission.Attributes {
	op := admission.Create
	var oldObj runtime.Object
	if old != nil {
		op, oldObj = admission.Update, old
	}
	return admission.NewAttributesRecord(obj, oldObj, rotation.Kind("CertificateAuthority").WithVersion("v1alpha1"), "", "ca",
		rotation.Resource("certificateauthorities").WithVersion("v1alpha1"), "", op, nil, false, &user.DefaultInfo{Name: "editor"})
}

func TestPublishNeedsTheRightsItUses(t *testing.T) {
	team := &rotation.Publish{ConfigMaps: &rotation.ConfigMapPublish{Namespaces: []string{"team"}}}
	everywhere := &rotation.Publish{ConfigMaps: &rotation.ConfigMapPublish{NamespaceSelector: &metav1.LabelSelector{}}}
	ctb := &rotation.Publish{ClusterTrustBundle: true}
	tests := map[string]struct {
		obj, old   *rotation.CertificateAuthority
		namespaces map[string]bool
		ctb        bool
		wantErr    string
	}{
		"own namespace":                 {obj: ca(team), namespaces: map[string]bool{"team": true}},
		"someone else's namespace":      {obj: ca(&rotation.Publish{ConfigMaps: &rotation.ConfigMapPublish{Namespaces: []string{"kube-system"}}}), namespaces: map[string]bool{"team": true}, wantErr: `namespace "kube-system"`},
		"selector without cluster-wide": {obj: ca(everywhere), namespaces: map[string]bool{"team": true}, wantErr: "all namespaces"},
		"selector with cluster-wide":    {obj: ca(everywhere), namespaces: map[string]bool{"": true}},
		"trust bundle without right":    {obj: ca(ctb), wantErr: "clustertrustbundles"},
		"trust bundle with right":       {obj: ca(ctb), ctb: true},
		"no publish":                    {obj: ca(nil)},
		"unchanged on update":           {obj: ca(&rotation.Publish{ClusterTrustBundle: true}), old: ca(&rotation.Publish{ClusterTrustBundle: true})},
		"changed on update":             {obj: ca(&rotation.Publish{ClusterTrustBundle: true}), old: ca(nil), wantErr: "clustertrustbundles"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := New()
			p.SetAuthorizer(allow(tc.namespaces, tc.ctb))
			if err := p.ValidateInitialization(); err != nil {
				t.Fatal(err)
			}
			err := p.Validate(context.Background(), attrs(tc.obj, tc.old), nil)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want 403 naming %s", err, tc.wantErr)
			}
		})
	}
}
