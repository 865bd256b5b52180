package issuer

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"rekey.io/rekey/pkg/apis/certificates"
	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	certlisters "rekey.io/rekey/pkg/generated/listers/certificates/v1alpha1"
)

// TestDryRun: what a dry-run create is told, from the real policy code
// on the request as stored, and that nothing is signed or recorded.
func TestDryRun(t *testing.T) {
	clientAuth := []certificates.KeyUsage{certificates.UsageDigitalSignature, certificates.UsageClientAuth}
	withSigner := func(f *fixture, mode certv1alpha1.ApprovalMode, maxDuration time.Duration) {
		indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
		if err := indexer.Add(&certv1alpha1.Signer{ObjectMeta: metav1.ObjectMeta{Name: validation.SignerObjectName("example.com/team")}, Spec: certv1alpha1.SignerSpec{
			SignerName: "example.com/team", CertificateAuthorityRef: certv1alpha1.CertificateAuthorityReference{Name: "ca"}, Approval: certv1alpha1.SignerApproval{Mode: mode},
			Policy: certv1alpha1.SignerPolicy{
				AllowedUsages: []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageClientAuth},
				MaxDuration:   metav1.Duration{Duration: maxDuration},
				Subject:       certv1alpha1.SubjectPolicy{CommonNameIsRequester: true},
			},
		}}); err != nil {
			t.Fatal(err)
		}
		f.sync.Signers = certlisters.NewSignerLister(indexer)
	}
	asking := func(csr *certificates.CertificateSigningRequest, d time.Duration) *certificates.CertificateSigningRequest {
		s := int32(d / time.Second)
		csr.Spec.ExpirationSeconds = &s
		return csr
	}
	tests := map[string]struct {
		withKey     bool
		mode        certv1alpha1.ApprovalMode
		maxDuration time.Duration
		notSynced   bool
		csr         func(t *testing.T) *certificates.CertificateSigningRequest
		want        []string
	}{
		"would issue, as asked": {withKey: true, mode: certv1alpha1.ApprovalManual, maxDuration: 10 * time.Hour,
			csr: func(t *testing.T) *certificates.CertificateSigningRequest {
				return asking(request(t, "example.com/team", "alice", []string{"dev"}, clientAuth...), time.Hour)
			},
			want: []string{certv1alpha1.DryRunWarningPrefix + `signer "example.com/team"` + certv1alpha1.DryRunWouldIssue, `subject "CN=alice,O=dev"`, "subject alternative names none",
				"key ECDSA P-256", "usages digital signature, client auth", "lifetime 1h0m0s (until about 2026-11-22T13:00:00Z)",
				`CA "ca" (key ca-01234567-1, CN=CA, fingerprint SHA256:`, "approval Manual: issued once someone with verb approve on the signer approves it"}},
		"capped by maxDuration": {withKey: true, mode: certv1alpha1.ApprovalManual, maxDuration: 2 * time.Hour,
			csr: func(t *testing.T) *certificates.CertificateSigningRequest {
				return asking(request(t, "example.com/team", "alice", nil, clientAuth...), 5*time.Hour)
			},
			want: []string{"lifetime 2h0m0s (until about 2026-11-22T14:00:00Z, capped by spec.policy.maxDuration 2h0m0s; asked 5h0m0s)"}},
		"cut at the CA's expiry": {withKey: true, mode: certv1alpha1.ApprovalNodeClient, maxDuration: 720 * time.Hour,
			csr: func(t *testing.T) *certificates.CertificateSigningRequest {
				return asking(request(t, "example.com/team", "alice", nil, clientAuth...), 48*time.Hour)
			},
			want: []string{"lifetime 24h0m0s (until about 2026-11-23T12:00:00Z, cut at the CA's expiry; asked 48h0m0s)", "approval NodeClient: decided at create, which a dry run does not do"}},
		"the requester's name is the policy's": {withKey: true, maxDuration: time.Hour,
			csr: func(t *testing.T) *certificates.CertificateSigningRequest {
				csr := request(t, "example.com/team", "alice", nil, clientAuth...)
				csr.Spec.Username = "mallory"
				return csr
			},
			want: []string{`signer "example.com/team" would refuse: reason SignerPolicyViolation: policy.subject.commonNameIsRequester: common name "alice" must be the requesting user's name "mallory"`}},
		"a usage the policy does not allow": {withKey: true, maxDuration: time.Hour,
			csr: func(t *testing.T) *certificates.CertificateSigningRequest {
				return request(t, "example.com/team", "alice", nil, certificates.UsageServerAuth)
			},
			want: []string{`would refuse: reason SignerPolicyViolation: policy.allowedUsages: usage "server auth" is not allowed`}},
		"no Signer": {withKey: true, maxDuration: time.Hour,
			csr: func(t *testing.T) *certificates.CertificateSigningRequest {
				return request(t, "other.org/x", "alice", nil, clientAuth...)
			},
			want: []string{`no Signer of this server serves "other.org/x": rekey would store the request and never sign it`}},
		"a CA that cannot sign now": {withKey: false, maxDuration: time.Hour,
			csr: func(t *testing.T) *certificates.CertificateSigningRequest {
				return request(t, "example.com/team", "alice", nil, clientAuth...)
			},
			want: []string{`signer "example.com/team" cannot sign now: CertificateAuthority "ca" has no key yet`}},
		"Signers not listed yet": {withKey: true, maxDuration: time.Hour, notSynced: true,
			csr: func(t *testing.T) *certificates.CertificateSigningRequest {
				return request(t, "example.com/team", "alice", nil, clientAuth...)
			},
			want: []string{"the Signer list is not loaded yet"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, tc.withKey)
			withSigner(f, tc.mode, tc.maxDuration)
			if tc.notSynced {
				f.sync.Synced = func() bool { return false }
			}
			got := f.sync.DryRun(context.Background(), tc.csr(t))
			if !strings.HasPrefix(got, certv1alpha1.DryRunWarningPrefix) {
				t.Fatalf("%q lacks the prefix", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("%q\nlacks %q", got, w)
				}
			}
			if len(f.records.list) != 0 {
				t.Fatal("a dry run recorded an issuance")
			}
		})
	}
}
