package plugin

import (
	"bytes"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	attv1alpha1 "rekey.io/rekey/pkg/apis/attestation/v1alpha1"
)

func TestPrintAttestation(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	for name, tc := range map[string]struct {
		na   attv1alpha1.NodeAttestation
		want []string
	}{
		"attested": {na: attv1alpha1.NodeAttestation{
			ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: attv1alpha1.NodeAttestationSpec{PolicyName: "p", EKCertificate: []byte{1}},
			Status: attv1alpha1.NodeAttestationStatus{Phase: attv1alpha1.NodeAttestationAttested, EKFingerprint: "ab12", BoundNode: "n1",
				LastAttested: &attv1alpha1.AttestedRecord{Time: at, PolicyName: "p", PCRIndexes: []int32{0, 7}, FirstUse: true, Request: "node-csr-x"},
				Conditions:   []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Attested", Message: "certificate request node-csr-x answered the challenge", LastTransitionTime: at}}},
		}, want: []string{"Phase:", "Attested", "ab12", "Bound to node:   n1", "first use", "sha256 [0 7]", "node-csr-x", "Ready:", "True (Attested)"}},
		"refused": {na: attv1alpha1.NodeAttestation{
			ObjectMeta: metav1.ObjectMeta{Name: "n2"}, Spec: attv1alpha1.NodeAttestationSpec{PolicyName: "p"},
			Status: attv1alpha1.NodeAttestationStatus{Phase: attv1alpha1.NodeAttestationRefused, EKFingerprint: "cd34",
				Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "EKNotTrusted", Message: "x509: certificate signed by unknown authority", LastTransitionTime: at}}},
		}, want: []string{"Refused", "EK certificate:  no", "Bound to node:   <none>", "False (EKNotTrusted)", "unknown authority"}},
	} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			printAttestation(&out, &tc.na)
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}
