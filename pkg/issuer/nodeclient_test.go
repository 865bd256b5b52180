package issuer

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/test/fixtures"
)

func TestNodeClientSubresource(t *testing.T) {
	usages := []certv1alpha1.KeyUsage{certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageClientAuth}
	tests := map[string]struct {
		o        fixtures.CSROptions
		username string
		usages   []certv1alpha1.KeyUsage
		want     string
		ok       bool
	}{
		"self":                                {o: fixtures.CSROptions{CommonName: "system:node:n1", Organizations: []string{"system:nodes"}}, username: "system:node:n1", usages: usages, want: SubresourceSelfNodeClient, ok: true},
		"bootstrap":                           {o: fixtures.CSROptions{CommonName: "system:node:n1", Organizations: []string{"system:nodes"}}, username: "system:bootstrap:abc", usages: usages, want: SubresourceNodeClient, ok: true},
		"no key encipherment (ECDSA kubelet)": {o: fixtures.CSROptions{CommonName: "system:node:n1", Organizations: []string{"system:nodes"}}, username: "system:node:n1", usages: []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageClientAuth}, want: SubresourceSelfNodeClient, ok: true},
		"client auth only":                    {o: fixtures.CSROptions{CommonName: "system:node:n1", Organizations: []string{"system:nodes"}}, username: "system:node:n1", usages: []certv1alpha1.KeyUsage{certv1alpha1.UsageClientAuth}},
		"other organization":                  {o: fixtures.CSROptions{CommonName: "system:node:n1", Organizations: []string{"x"}}, username: "system:node:n1", usages: usages},
		"not a node CN":                       {o: fixtures.CSROptions{CommonName: "alice", Organizations: []string{"system:nodes"}}, username: "alice", usages: usages},
		"SAN":                                 {o: fixtures.CSROptions{CommonName: "system:node:n1", Organizations: []string{"system:nodes"}, DNSNames: []string{"n1"}}, username: "system:node:n1", usages: usages},
		"server auth":                         {o: fixtures.CSROptions{CommonName: "system:node:n1", Organizations: []string{"system:nodes"}}, username: "system:node:n1", usages: []certv1alpha1.KeyUsage{certv1alpha1.UsageKeyEncipherment, certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageServerAuth}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			csr := &certv1alpha1.CertificateSigningRequest{
				ObjectMeta: metav1.ObjectMeta{Name: "x"},
				Spec:       certv1alpha1.CertificateSigningRequestSpec{Request: fixtures.CSRPEM(t, tc.o), Username: tc.username, Usages: tc.usages},
			}
			got, ok := NodeClientSubresource(csr)
			if ok != tc.ok || got != tc.want {
				t.Fatalf("got %q %v, want %q %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
