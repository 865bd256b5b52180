package nodeattestationrestriction

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	"rekey.io/rekey/pkg/apis/attestation"
	"rekey.io/rekey/pkg/apis/certificates"
)

func node(name string) user.Info {
	return &user.DefaultInfo{Name: "system:node:" + name, Groups: []string{"system:nodes", user.AllAuthenticated}}
}

func TestValidate(t *testing.T) {
	bootstrapper := &user.DefaultInfo{Name: "bootstrap", Groups: []string{"rekey:tpm-bootstrappers"}}
	nameless := &user.DefaultInfo{Name: "kubelet", Groups: []string{"system:nodes"}}
	impostor := &user.DefaultInfo{Name: "system:node:n1", Groups: []string{"team-a"}}
	na := func(name string) runtime.Object {
		return &attestation.NodeAttestation{ObjectMeta: metav1.ObjectMeta{Name: name}}
	}
	nas := attestation.Resource("nodeattestations").WithVersion("v1alpha1")
	kind := attestation.Kind("NodeAttestation").WithVersion("v1alpha1")
	for name, tc := range map[string]struct {
		user        user.Info
		op          admission.Operation
		name        string // in the URL
		obj         runtime.Object
		subresource string
		resource    string
		allowed     bool
	}{
		"a node creates its own":                  {user: node("n1"), op: admission.Create, obj: na("n1"), allowed: true},
		"a node creates another's":                {user: node("n2"), op: admission.Create, obj: na("n1")},
		"a node updates its own":                  {user: node("n1"), op: admission.Update, name: "n1", obj: na("n1"), allowed: true},
		"a node updates another's":                {user: node("n2"), op: admission.Update, name: "n1", obj: na("n1")},
		"a node asks for its own challenge":       {user: node("n1"), op: admission.Create, name: "n1", subresource: "challenge", obj: &attestation.ChallengeRequest{}, allowed: true},
		"a node asks for another's challenge":     {user: node("n2"), op: admission.Create, name: "n1", subresource: "challenge", obj: &attestation.ChallengeRequest{}},
		"a node deletes another's":                {user: node("n2"), op: admission.Delete, name: "n1"},
		"a node deletes its own":                  {user: node("n1"), op: admission.Delete, name: "n1", allowed: true},
		"a node writes another's status":          {user: node("n2"), op: admission.Update, name: "n1", subresource: "status", obj: na("n1")},
		"a node without a name":                   {user: nameless, op: admission.Update, name: "kubelet", obj: na("kubelet")},
		"a node-like name outside system:nodes":   {user: impostor, op: admission.Update, name: "n2", obj: na("n2")},
		"a bootstrapper writes any (RBAC's call)": {user: bootstrapper, op: admission.Update, name: "n1", obj: na("n1"), allowed: true},
		"other resources are not this plugin's":   {user: node("n2"), op: admission.Create, name: "n1", resource: "certificatesigningrequests", allowed: true},
	} {
		t.Run(name, func(t *testing.T) {
			res := nas
			if tc.resource != "" {
				res = certificates.Resource(tc.resource).WithVersion("v1alpha1")
			}
			attrs := admission.NewAttributesRecord(tc.obj, nil, kind, "", tc.name, res, tc.subresource, tc.op, nil, false, tc.user)
			err := New().Validate(context.Background(), attrs, nil)
			if tc.allowed && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tc.allowed && !apierrors.IsForbidden(err) {
				t.Fatalf("want Forbidden, got %v", err)
			}
		})
	}
}
