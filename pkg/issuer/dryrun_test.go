package issuer

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"rekey.io/rekey/pkg/apis/certificates"
	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	certlisters "rekey.io/rekey/pkg/generated/listers/certificates/v1alpha1"
	"rekey.io/rekey/pkg/signing"
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
		caState     caState
		mode        certv1alpha1.ApprovalMode
		maxDuration time.Duration
		notSynced   bool
		csr         func(t *testing.T) *certificates.CertificateSigningRequest
		want        []string
		notWant     []string
	}{
		"would issue, as asked": {withKey: true, caState: caReady, mode: certv1alpha1.ApprovalManual, maxDuration: 10 * time.Hour,
			csr: func(t *testing.T) *certificates.CertificateSigningRequest {
				return asking(request(t, "example.com/team", "alice", []string{"dev"}, clientAuth...), time.Hour)
			},
			want: []string{certv1alpha1.DryRunWarningPrefix + `signer "example.com/team"` + certv1alpha1.DryRunWouldIssue, `subject "CN=alice,O=dev"`, "subject alternative names none",
				"key ECDSA P-256", "usages digital signature, client auth", "lifetime 1h0m0s (until about 2026-11-22T13:00:00Z)",
				"CA CN=CA (fingerprint SHA256:", "approval Manual: issued once someone with verb approve on the signer approves it"},
			notWant: []string{"ca-01234567-1", `"ca"`}},
		"capped by maxDuration": {withKey: true, caState: caReady, mode: certv1alpha1.ApprovalManual, maxDuration: 2 * time.Hour,
			csr: func(t *testing.T) *certificates.CertificateSigningRequest {
				return asking(request(t, "example.com/team", "alice", nil, clientAuth...), 5*time.Hour)
			},
			want: []string{"lifetime 2h0m0s (until about 2026-11-22T14:00:00Z, capped by spec.policy.maxDuration 2h0m0s, asked 5h0m0s)"}},
		"cut at the CA's expiry": {withKey: true, caState: caReady, mode: certv1alpha1.ApprovalNodeClient, maxDuration: 720 * time.Hour,
			csr: func(t *testing.T) *certificates.CertificateSigningRequest {
				return asking(request(t, "example.com/team", "alice", nil, clientAuth...), 48*time.Hour)
			},
			want: []string{"lifetime 24h0m0s (until about 2026-11-23T12:00:00Z, cut at the CA's expiry, asked 48h0m0s)", "approval NodeClient: decided at create, which a dry run does not do"}},
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
		"a CA that has published nothing": {withKey: false, maxDuration: time.Hour,
			csr: func(t *testing.T) *certificates.CertificateSigningRequest {
				return request(t, "example.com/team", "alice", nil, clientAuth...)
			},
			want: []string{`signer "example.com/team" cannot sign now: its CA is not ready (the request would wait until it is)`}},
		// The CA's Ready message can be a raw key store error (host paths,
		// PKCS#11): the requester is told only that the CA is not ready.
		"a CA that is not Ready": {withKey: true, caState: caNotReady, maxDuration: time.Hour,
			csr: func(t *testing.T) *certificates.CertificateSigningRequest {
				return request(t, "example.com/team", "alice", nil, clientAuth...)
			},
			want:    []string{`signer "example.com/team" cannot sign now: its CA is not ready (the request would wait until it is)`},
			notWant: []string{"/var/lib", "CKR_PIN_INCORRECT", `"ca"`}},
		// The answer comes from the CA's published status, never from its
		// key: a CA whose key is not loadable here (no binding) but whose
		// status says Ready still gives the would-issue answer, so a dry
		// run never reaches the key store.
		"the key store is never read": {withKey: false, caState: caReady, maxDuration: time.Hour,
			csr: func(t *testing.T) *certificates.CertificateSigningRequest {
				return request(t, "example.com/team", "alice", nil, clientAuth...)
			},
			want: []string{certv1alpha1.DryRunWouldIssue, "CA CN=CA (fingerprint SHA256:"}},
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
			f.publishCA(t, tc.caState)
			if tc.notSynced {
				f.sync.Synced = func() bool { return false }
			}
			got := f.sync.DryRun(context.Background(), tc.csr(t))
			if !strings.HasPrefix(got, certv1alpha1.DryRunWarningPrefix) {
				t.Fatalf("%q lacks the prefix", got)
			}
			// "; " separates the clauses (the plugin prints one a
			// line), so none may fall inside parentheses.
			for _, clause := range strings.Split(got, "; ") {
				if strings.Count(clause, "(") != strings.Count(clause, ")") {
					t.Errorf("%q\nhas \"; \" inside parentheses: %q", got, clause)
				}
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("%q\nlacks %q", got, w)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(got, w) {
					t.Errorf("%q\nshould not contain %q", got, w)
				}
			}
			if len(f.records.list) != 0 {
				t.Fatal("a dry run recorded an issuance")
			}
		})
	}
}

type caState int

const (
	caUnpublished caState = iota
	caReady
	caNotReady
)

// publishCA writes the fixture CA's status as the CertificateAuthority
// controller would: status.current (a CA certificate, made here when the
// fixture has no key) and the Ready condition.
func (f *fixture) publishCA(t *testing.T, state caState) {
	t.Helper()
	if state == caUnpublished {
		return
	}
	cert := f.caCert
	if cert == nil {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		if cert, err = signing.NewSelfSignedCA("CA", key, 24*time.Hour, now); err != nil {
			t.Fatal(err)
		}
	}
	ca, err := f.sync.Signing.Authorities.Lister.Get("ca")
	if err != nil {
		t.Fatal(err)
	}
	ca = ca.DeepCopy()
	ca.Status.Current = &rotationv1alpha1.CACertificate{
		Certificate: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})),
		Fingerprint: signing.Fingerprint(cert),
		KeyID:       "ca-01234567-1",
	}
	ready := metav1.Condition{Type: rotationv1alpha1.CertificateAuthorityReady, Status: metav1.ConditionTrue, Reason: "Ready"}
	if state == caNotReady {
		ready = metav1.Condition{Type: rotationv1alpha1.CertificateAuthorityReady, Status: metav1.ConditionFalse, Reason: "CAUnavailable",
			Message: "open /var/lib/rekey/ca.key: permission denied; CKR_PIN_INCORRECT"}
	}
	ca.Status.Conditions = []metav1.Condition{ready}
	if err := f.caIndexer.Update(ca); err != nil {
		t.Fatal(err)
	}
}
