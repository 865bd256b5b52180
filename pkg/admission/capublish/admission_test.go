package capublish

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
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

// TestRemovingWhatIsPublishedNeedsDelete: rekey deletes the bundles a CA
// no longer asks for and those of a deleted CA, so taking a namespace,
// the ClusterTrustBundle or the whole CA away needs delete where the
// bundles are (a CA editor with no rights in kube-system could otherwise
// have rekey delete the bundle it published there).
func TestRemovingWhatIsPublishedNeedsDelete(t *testing.T) {
	both := &rotation.Publish{ConfigMaps: &rotation.ConfigMapPublish{Namespaces: []string{"team", "kube-system"}}, ClusterTrustBundle: true}
	teamOnly := &rotation.Publish{ConfigMaps: &rotation.ConfigMapPublish{Namespaces: []string{"team"}}, ClusterTrustBundle: true}
	renamed := &rotation.Publish{ConfigMaps: &rotation.ConfigMapPublish{Name: "other", Namespaces: []string{"team", "kube-system"}}, ClusterTrustBundle: true}
	selector := &rotation.Publish{ConfigMaps: &rotation.ConfigMapPublish{NamespaceSelector: &metav1.LabelSelector{}}}
	noCTB := &rotation.Publish{ConfigMaps: both.ConfigMaps}
	// grants are "verb resource namespace" the user holds; create is held
	// everywhere.
	authz := func(grants ...string) authorizer.Authorizer {
		return authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
			if a.GetVerb() == "create" {
				return authorizer.DecisionAllow, "", nil
			}
			for _, g := range grants {
				if g == a.GetVerb()+" "+a.GetResource()+" "+a.GetNamespace() {
					return authorizer.DecisionAllow, "", nil
				}
			}
			return authorizer.DecisionNoOpinion, "", nil
		})
	}
	tests := map[string]struct {
		obj, old *rotation.CertificateAuthority
		delete   bool
		grants   []string
		wantErr  string
	}{
		"drop a namespace without delete there": {obj: ca(teamOnly), old: ca(both), grants: []string{"delete configmaps team"}, wantErr: `namespace "kube-system"`},
		"drop a namespace with delete there":    {obj: ca(teamOnly), old: ca(both), grants: []string{"delete configmaps kube-system"}},
		"rename without delete everywhere":      {obj: ca(renamed), old: ca(both), grants: []string{"delete configmaps team"}, wantErr: `namespace "kube-system"`},
		"stop publishing":                       {obj: ca(nil), old: ca(both), grants: []string{"delete configmaps team", "delete configmaps kube-system"}, wantErr: "clustertrustbundles"},
		"turn the trust bundle off":             {obj: ca(noCTB), old: ca(both), wantErr: "clustertrustbundles"},
		"turn it off with delete":               {obj: ca(noCTB), old: ca(both), grants: []string{"delete clustertrustbundles "}},
		"drop a selector":                       {obj: ca(teamOnly), old: ca(selector), grants: []string{"delete configmaps team"}, wantErr: "all namespaces"},
		"delete the CA without delete rights":   {old: ca(both), delete: true, grants: []string{"delete configmaps team", "delete clustertrustbundles "}, wantErr: `namespace "kube-system"`},
		"delete the CA with delete rights":      {old: ca(both), delete: true, grants: []string{"delete configmaps team", "delete configmaps kube-system", "delete clustertrustbundles "}},
		"delete a CA that publishes nothing":    {old: ca(nil), delete: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := New()
			p.SetAuthorizer(authz(tc.grants...))
			a := attrs(tc.obj, tc.old)
			if tc.delete {
				a = admission.NewAttributesRecord(nil, tc.old, rotation.Kind("CertificateAuthority").WithVersion("v1alpha1"), "", "ca",
					rotation.Resource("certificateauthorities").WithVersion("v1alpha1"), "", admission.Delete, nil, false, &user.DefaultInfo{Name: "editor"})
			}
			err := p.Validate(context.Background(), a, nil)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("got %v, want Forbidden naming %s", err, tc.wantErr)
			}
		})
	}
}

// TestDeletingThroughTheGarbageCollectorNeedsDelete: adding an owner
// reference (the garbage collector, which may delete anything, then
// deletes the CA) or removing the last finalizer of a CA being deleted
// takes what it published away as a delete would, so it needs the same
// rights; an update that touches neither does not.
func TestDeletingThroughTheGarbageCollectorNeedsDelete(t *testing.T) {
	published := &rotation.Publish{ConfigMaps: &rotation.ConfigMapPublish{Namespaces: []string{"kube-system"}}}
	createOnly := authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		if a.GetVerb() == "create" {
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionNoOpinion, "", nil
	})
	owned := func(p *rotation.Publish, uids ...string) *rotation.CertificateAuthority {
		c := ca(p)
		for _, uid := range uids {
			c.OwnerReferences = append(c.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "Namespace", Name: "x", UID: types.UID(uid)})
		}
		return c
	}
	deleting := func(finalizers ...string) *rotation.CertificateAuthority {
		c := ca(published)
		now := metav1.Now()
		c.DeletionTimestamp, c.Finalizers = &now, finalizers
		return c
	}
	tests := map[string]struct {
		obj, old *rotation.CertificateAuthority
		refused  bool
	}{
		"owner added":                    {obj: owned(published, "u1"), old: ca(published), refused: true},
		"owner kept":                     {obj: owned(published, "u1"), old: owned(published, "u1")},
		"owner added, nothing published": {obj: owned(nil, "u1"), old: ca(nil)},
		"created with an owner":          {obj: owned(published, "u1"), refused: true},
		"last finalizer removed":         {obj: deleting(), old: deleting("example.com/hold"), refused: true},
		"finalizers kept":                {obj: deleting("example.com/hold"), old: deleting("example.com/hold")},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := New()
			p.SetAuthorizer(createOnly)
			err := p.Validate(context.Background(), attrs(tc.obj, tc.old), nil)
			if tc.refused != (err != nil) {
				t.Fatalf("refused = %v (%v), want %v", err != nil, err, tc.refused)
			}
			if tc.refused && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `delete the ConfigMap it published in namespace "kube-system"`)) {
				t.Fatalf("got %v, want Forbidden naming the delete", err)
			}
		})
	}
}
