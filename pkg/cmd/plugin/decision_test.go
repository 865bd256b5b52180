package plugin

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	k8stesting "k8s.io/client-go/testing"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
)

func TestDecision(t *testing.T) {
	pending := &certv1alpha1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "pending"}}
	denied := &certv1alpha1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "denied"},
		Status: certv1alpha1.CertificateSigningRequestStatus{Conditions: []certv1alpha1.CertificateSigningRequestCondition{{Type: certv1alpha1.CertificateDenied, Status: "True"}}}}
	approved := &certv1alpha1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "approved"},
		Status: certv1alpha1.CertificateSigningRequestStatus{Conditions: []certv1alpha1.CertificateSigningRequestCondition{{Type: certv1alpha1.CertificateApproved, Status: "True"}}}}
	tests := map[string]struct {
		args        []string
		wantErr     bool
		wantOut     string
		wantErrOut  string
		wantUpdates int
	}{
		"approve a pending request":      {args: []string{"pending", "--reason=Checked", "--message=by hand"}, wantOut: "pending approved", wantUpdates: 1},
		"already approved: no change":    {args: []string{"approved"}, wantOut: "approved approved (no change)"},
		"denied cannot be approved":      {args: []string{"denied"}, wantErr: true, wantErrOut: "already denied"},
		"missing request":                {args: []string{"nope"}, wantErr: true, wantErrOut: `cannot approve certificatesigningrequest "nope"`},
		"several, one failing, all seen": {args: []string{"nope", "pending"}, wantErr: true, wantOut: "pending approved", wantErrOut: "nope", wantUpdates: 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			client := fake.NewSimpleClientset(pending.DeepCopy(), denied.DeepCopy(), approved.DeepCopy())
			var out, errOut bytes.Buffer
			cmd := newDecisionCommand(decisionApprove, func() (clientset.Interface, error) { return client, nil },
				genericiooptions.IOStreams{Out: &out, ErrOut: &errOut})
			cmd.SetArgs(tc.args)
			cmd.SetOut(&out)
			cmd.SetErr(&errOut)
			err := cmd.ExecuteContext(context.Background())
			if (err != nil) != tc.wantErr || (err != nil && !IsReported(err)) {
				t.Fatalf("error = %v", err)
			}
			if !strings.Contains(out.String(), tc.wantOut) || !strings.Contains(errOut.String(), tc.wantErrOut) {
				t.Fatalf("out %q, errOut %q", out.String(), errOut.String())
			}
			updates := 0
			for _, a := range client.Actions() {
				if a.GetVerb() == "update" {
					if a.GetSubresource() != "approval" {
						t.Fatalf("wrote %s, want only /approval", a.GetSubresource())
					}
					c := a.(k8stesting.UpdateAction).GetObject().(*certv1alpha1.CertificateSigningRequest).Status.Conditions
					if last := c[len(c)-1]; last.Type != certv1alpha1.CertificateApproved || last.Status != metav1.ConditionTrue {
						t.Fatalf("condition %+v", last)
					}
					updates++
				}
			}
			if updates != tc.wantUpdates {
				t.Fatalf("%d updates, want %d", updates, tc.wantUpdates)
			}
		})
	}
}

// TestOutcomeReportsWhatTheApprovalWriteDecided: rekey signs (or fails)
// in the approval write, and the plugin says so.
func TestOutcomeReportsWhatTheApprovalWriteDecided(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	notAfter := time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC)
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "alice"}, NotAfter: notAfter}, &x509.Certificate{SerialNumber: big.NewInt(2)}, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	issued := &certv1alpha1.CertificateSigningRequest{Status: certv1alpha1.CertificateSigningRequestStatus{Certificate: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}}
	failed := &certv1alpha1.CertificateSigningRequest{Status: certv1alpha1.CertificateSigningRequestStatus{Conditions: []certv1alpha1.CertificateSigningRequestCondition{
		{Type: certv1alpha1.CertificateApproved}, {Type: certv1alpha1.CertificateFailed, Reason: "SignerPolicyViolation", Message: "usage server auth"}}}}
	for _, tc := range []struct {
		csr  *certv1alpha1.CertificateSigningRequest
		want string
	}{
		{nil, ""},
		{&certv1alpha1.CertificateSigningRequest{}, ""},
		{issued, `; issued to "CN=alice", valid until 2027-01-02T03:04:05Z`},
		{failed, "; failed: SignerPolicyViolation: usage server auth"},
	} {
		if got := outcome(tc.csr); got != tc.want {
			t.Errorf("outcome = %q, want %q", got, tc.want)
		}
	}
}
