package subjectrestriction

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/test/fixtures"
)

func TestSubjectRestriction(t *testing.T) {
	client := []certificates.KeyUsage{certificates.UsageDigitalSignature, certificates.UsageClientAuth}
	tests := map[string]struct {
		signer      string
		orgs        []string
		usages      []certificates.KeyUsage
		subresource string
		wantAllowed bool
	}{
		"masters to apiserver client refused": {signer: certificates.KubeAPIServerClientSignerName, orgs: []string{"dev", "system:masters"}, usages: client},
		"other group to apiserver client":     {signer: certificates.KubeAPIServerClientSignerName, orgs: []string{"dev"}, usages: client, wantAllowed: true},
		// Any signer's CA may be in a kube-apiserver's --client-ca-file.
		"masters to another signer refused":  {signer: "example.com/signer", orgs: []string{"system:masters"}, usages: client},
		"masters to kubelet client refused":  {signer: certificates.KubeAPIServerClientKubeletSignerName, orgs: []string{"system:masters"}, usages: client},
		"masters with usage any refused":     {signer: "example.com/signer", orgs: []string{"system:masters"}, usages: []certificates.KeyUsage{certificates.UsageAny}},
		"masters with no EKU at all refused": {signer: "example.com/signer", orgs: []string{"system:masters"}, usages: []certificates.KeyUsage{certificates.UsageDigitalSignature}},
		"masters serving certificate":        {signer: "example.com/signer", orgs: []string{"system:masters"}, usages: []certificates.KeyUsage{certificates.UsageDigitalSignature, certificates.UsageServerAuth}, wantAllowed: true},
		// The selfnodeclient and nodeclient subresources create requests too.
		"masters through selfnodeclient refused": {signer: certificates.KubeAPIServerClientKubeletSignerName, orgs: []string{"system:nodes", "system:masters"}, usages: client, subresource: "selfnodeclient"},
		"masters through nodeclient refused":     {signer: certificates.KubeAPIServerClientKubeletSignerName, orgs: []string{"system:masters"}, usages: client, subresource: "nodeclient"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			obj := &certificates.CertificateSigningRequest{
				ObjectMeta: metav1.ObjectMeta{Name: "req"},
				Spec: certificates.CertificateSigningRequestSpec{
					SignerName: tc.signer,
					Usages:     tc.usages,
					Request:    fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "x", Organizations: tc.orgs}),
				},
			}
			a := admission.NewAttributesRecord(obj, nil, certificates.Kind("CertificateSigningRequest").WithVersion("v1alpha1"),
				"", "req", certificates.Resource("certificatesigningrequests").WithVersion("v1alpha1"), tc.subresource,
				admission.Create, &metav1.CreateOptions{}, false, &user.DefaultInfo{Name: "bob"})
			err := New().Validate(context.Background(), a, nil)
			if tc.wantAllowed && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tc.wantAllowed && !apierrors.IsForbidden(err) {
				t.Fatalf("want Forbidden, got %v", err)
			}
		})
	}
}
