package plugin

import (
	"bytes"
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"strings"
	"testing"
	"time"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
)

func TestInspect(t *testing.T) {
	current, previous, stranger := newTestCA(t, "team CA 2"), newTestCA(t, "team CA 1"), newTestCA(t, "another CA")
	key := mustKeyPEM(t)
	signer, err := parsePrivateKeyPEM("k", "k", []byte(key))
	if err != nil {
		t.Fatal(err)
	}
	seconds := int32(3600)
	request, err := createRequestPEM(mustTemplate(t, "CN=alice,O=dev", "alice.example.com"), signer)
	if err != nil {
		t.Fatal(err)
	}
	csrFor := func(name string, ca *testCA, conditions ...certv1alpha1.CertificateSigningRequestCondition) *certv1alpha1.CertificateSigningRequest {
		csr := &certv1alpha1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{Name: name, UID: "uid-" + "name", CreationTimestamp: metav1.NewTime(time.Now().Add(-time.Hour))},
			Spec: certv1alpha1.CertificateSigningRequestSpec{Request: request, SignerName: "example.com/team", Username: "alice", Groups: []string{"dev"},
				Usages: []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageClientAuth}, ExpirationSeconds: &seconds},
			Status: certv1alpha1.CertificateSigningRequestStatus{Conditions: conditions},
		}
		if ca != nil {
			csr.Status.Certificate = ca.issue(t, request)
		}
		return csr
	}
	approved := certv1alpha1.CertificateSigningRequestCondition{Type: certv1alpha1.CertificateApproved, Status: metav1.ConditionTrue, Reason: "KubectlRekeyApprove", Message: "approved by hand",
		LastUpdateTime: metav1.NewTime(time.Now().Add(-time.Hour))}
	failed := certv1alpha1.CertificateSigningRequestCondition{Type: certv1alpha1.CertificateFailed, Status: metav1.ConditionTrue, Reason: "SignerPolicyViolation", Message: "policy.allowedUsages: usage \"server auth\" is not allowed",
		LastUpdateTime: metav1.NewTime(time.Now().Add(-time.Hour))}
	teamSigner := &certv1alpha1.Signer{ObjectMeta: metav1.ObjectMeta{Name: "example.com:team"},
		Spec: certv1alpha1.SignerSpec{SignerName: "example.com/team", CertificateAuthorityRef: certv1alpha1.CertificateAuthorityReference{Name: "team-ca"}}}
	teamCA := &rotationv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "team-ca"}, Status: rotationv1alpha1.CertificateAuthorityStatus{
		Current:  &rotationv1alpha1.CACertificate{Certificate: current.pem(), KeyID: "team-ca-2"},
		Previous: &rotationv1alpha1.CACertificate{Certificate: previous.pem(), KeyID: "team-ca-1"},
	}}
	event := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "by-current.1", Namespace: "default"},
		InvolvedObject: corev1.ObjectReference{APIVersion: "certificates.rekey.io/v1alpha1", Kind: "CertificateSigningRequest", Name: "by-current", UID: "uid-name"},
		Type:           corev1.EventTypeNormal, Reason: "Issued", Message: "issued by team-ca", Source: corev1.EventSource{Component: "rekey-signer"}, LastTimestamp: metav1.NewTime(time.Now().Add(-time.Minute))}
	otherEvent := event.DeepCopy()
	otherEvent.Name, otherEvent.InvolvedObject.APIVersion, otherEvent.Reason = "by-current.2", "certificates.k8s.io/v1", "NotThisOne"
	// Forgeries by someone who can create events: in another namespace
	// (with the right UID), in default without a UID, with another UID.
	forged := func(name, namespace, uid, reason string) *corev1.Event {
		e := event.DeepCopy()
		e.Name, e.Namespace, e.InvolvedObject.UID, e.Reason, e.Message = name, namespace, types.UID(uid), reason, "forged"
		return e
	}
	forgeries := []runtime.Object{
		forged("f1", "mallory", "uid-name", "ForgedOtherNamespace"),
		forged("f2", "default", "", "ForgedNoUID"),
		forged("f3", "default", "uid-other", "ForgedOtherUID"),
	}

	tests := map[string]struct {
		csr         *certv1alpha1.CertificateSigningRequest
		noSigner    bool
		eventsError bool
		want        []string
		notWant     []string
	}{
		"issued by the current key, with events": {csr: csrFor("by-current", current, approved), want: []string{
			"Requester:         alice (groups dev)", "State:             Issued", "Subject:         CN=alice,O=dev", "SANs:            DNS:alice.example.com",
			"Key:             ECDSA P-256", "Usages:          digital signature, client auth", "Duration asked:  1h0m0s",
			"Key usage:       digital signature, client auth", "Serial:          2a", "(expires in 23h)", "Issuer:          CN=team CA 2",
			"Issuing CA:      team-ca, its current key (team-ca-2)",
			"Approved  True    KubectlRekeyApprove  60m  approved by hand",
			"Normal  Issued  60s  rekey-signer  issued by team-ca",
		}, notWant: []string{"NotThisOne", "Forged", "forged"}},
		"issued by the previous key": {csr: csrFor("by-previous", previous, approved), want: []string{"Issuing CA:      team-ca, its previous key (a rotation is taking it out: renew before the rotation completes) (team-ca-1)"}},
		"issued by neither":          {csr: csrFor("by-stranger", stranger, approved), want: []string{"Issuing CA:      team-ca, neither its current nor its previous key"}},
		"no Signer to read":          {csr: csrFor("no-signer", current, approved), noSigner: true, want: []string{`Issuing CA:      unknown (reading the Signer of "example.com/team": `}},
		"failed, no events API": {csr: csrFor("failed", nil, approved, failed), eventsError: true, want: []string{
			"State:             Failed", "Certificate:       none",
			"Failed    True    SignerPolicyViolation  60m  policy.allowedUsages: usage \"server auth\" is not allowed", "Events:\n  none\n"}},
		"pending": {csr: csrFor("pending", nil), want: []string{"State:             Pending approval", "Conditions:\n  none\n", "Events:\n  none\n"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			client := fake.NewSimpleClientset(tc.csr, teamCA.DeepCopy())
			if !tc.noSigner {
				if err := client.Tracker().Add(teamSigner.DeepCopy()); err != nil {
					t.Fatal(err)
				}
			}
			newKube := func() (kubernetes.Interface, error) {
				return kubefake.NewSimpleClientset(append([]runtime.Object{event.DeepCopy(), otherEvent.DeepCopy()}, forgeries...)...), nil
			}
			if tc.eventsError {
				// A standalone server serves no events: the list is a 404.
				newKube = func() (kubernetes.Interface, error) {
					kube := kubefake.NewSimpleClientset()
					kube.PrependReactor("list", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
						return true, nil, apierrors.NewNotFound(corev1.Resource("events"), "")
					})
					return kube, nil
				}
			}
			var out bytes.Buffer
			cmd := newInspectCommand(func() (clientset.Interface, error) { return client, nil }, newKube, genericiooptions.IOStreams{Out: &out, ErrOut: &out})
			cmd.SetArgs([]string{tc.csr.Name})
			if err := cmd.ExecuteContext(context.Background()); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(out.String(), w) {
					t.Errorf("output has %q:\n%s", w, out.String())
				}
			}
		})
	}
	t.Run("a missing request", func(t *testing.T) {
		var out bytes.Buffer
		cmd := newInspectCommand(func() (clientset.Interface, error) { return fake.NewSimpleClientset(), nil }, nil, genericiooptions.IOStreams{Out: &out, ErrOut: &out})
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		cmd.SetArgs([]string{"nope"})
		if err := cmd.ExecuteContext(context.Background()); err == nil || !strings.Contains(err.Error(), `cannot read certificatesigningrequest "nope"`) {
			t.Fatalf("error %v", err)
		}
	})
}

func mustTemplate(t *testing.T, subject string, dns ...string) *x509.CertificateRequest {
	t.Helper()
	name, err := parseSubject(subject)
	if err != nil {
		t.Fatal(err)
	}
	return &x509.CertificateRequest{Subject: name, DNSNames: dns}
}

// TestInspectEscapesControlCharacters: what a requester (or anyone who
// can write events) chose is shown with its control characters escaped,
// so that a common name "system:admin\x1b[2K\rCN=alice" cannot read as
// CN=alice on the terminal (review #32 finding 1).
func TestInspectEscapesControlCharacters(t *testing.T) {
	signer, err := parsePrivateKeyPEM("k", "k", []byte(mustKeyPEM(t)))
	if err != nil {
		t.Fatal(err)
	}
	hostile := "system:admin\x1b[2K\rCN=alice"
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: hostile}, DNSNames: []string{"a\x1b]0;x\x07.example.com"}}
	request, err := createRequestPEM(tmpl, signer)
	if err != nil {
		t.Fatal(err)
	}
	csr := &certv1alpha1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "evil", UID: "uid-evil"},
		Spec:       certv1alpha1.CertificateSigningRequestSpec{Request: request, SignerName: "example.com/team", Username: "mallory\u202e"},
		Status: certv1alpha1.CertificateSigningRequestStatus{Conditions: []certv1alpha1.CertificateSigningRequestCondition{{
			Type: certv1alpha1.CertificateFailed, Status: metav1.ConditionTrue, Reason: "X", Message: "bad\x1b[31m"}}},
	}
	var out bytes.Buffer
	inspect(context.Background(), &out, fake.NewSimpleClientset(), nil, csr, time.Now())
	for _, c := range out.String() {
		if c != '\n' && !unicode.IsPrint(c) {
			t.Errorf("output holds control or format character %U:\n%s", c, out.String())
		}
	}
	for _, w := range []string{`"CN=system:admin\x1b[2K\rCN=alice"`, `DNS:"a\x1b]0;x\a.example.com"`, `"mallory\u202e"`, `"bad\x1b[31m"`} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %s:\n%s", w, out.String())
		}
	}
}
