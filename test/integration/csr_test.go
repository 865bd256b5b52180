// Package integration drives a real rekey-apiserver (standalone, with its
// embedded etcd) through the generated clientset and the real kubectl.
package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/test/fixtures"
	"rekey.io/rekey/test/framework"
)

func newCSR(t *testing.T, name, signer string) *certv1alpha1.CertificateSigningRequest {
	return &certv1alpha1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certv1alpha1.CertificateSigningRequestSpec{
			Request:           fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: name}),
			SignerName:        signer,
			ExpirationSeconds: ptr.To[int32](3600),
			Usages:            []certv1alpha1.KeyUsage{certv1alpha1.UsageDigitalSignature, certv1alpha1.UsageClientAuth},
		},
	}
}

func addCondition(csr *certv1alpha1.CertificateSigningRequest, typ certv1alpha1.RequestConditionType, reason string) {
	csr.Status.Conditions = append(csr.Status.Conditions, certv1alpha1.CertificateSigningRequestCondition{
		Type: typ, Status: metav1.ConditionTrue, Reason: reason, Message: "by the integration test",
	})
}

func hasCondition(csr *certv1alpha1.CertificateSigningRequest, typ certv1alpha1.RequestConditionType) bool {
	for _, c := range csr.Status.Conditions {
		if c.Type == typ {
			return true
		}
	}
	return false
}

func TestCSRLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := framework.StartStandalone(t, t.TempDir())
	csrs := srv.Client.CertificatesV1alpha1().CertificateSigningRequests()

	w, err := csrs.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.signerName", "example.com/watched").String()})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	defer w.Stop()

	// Identity in the body is ignored: the admin's certificate decides.
	req := newCSR(t, "alpha", "example.com/watched")
	req.Spec.Username, req.Spec.UID, req.Spec.Groups = "system:admin", "forged", []string{"forged-group"}
	req.Status.Conditions = []certv1alpha1.CertificateSigningRequestCondition{{Type: "Approved", Status: "True"}}
	created, err := csrs.Create(ctx, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if created.Spec.Username != "rekey-admin" || created.Spec.UID != "" || !containsAll(created.Spec.Groups, "system:masters", "system:authenticated") || containsAll(created.Spec.Groups, "forged-group") {
		t.Fatalf("identity not stamped from the authenticated user: %q %q %v", created.Spec.Username, created.Spec.UID, created.Spec.Groups)
	}
	if len(created.Status.Conditions) != 0 {
		t.Fatalf("status from the create body was kept: %+v", created.Status)
	}
	if _, err := csrs.Create(ctx, newCSR(t, "beta", "example.com/other"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create beta: %v", err)
	}

	got, err := csrs.Get(ctx, "alpha", metav1.GetOptions{})
	if err != nil || !bytes.Equal(got.Spec.Request, req.Spec.Request) {
		t.Fatalf("get: %v", err)
	}
	all, err := csrs.List(ctx, metav1.ListOptions{})
	if err != nil || len(all.Items) != 2 {
		t.Fatalf("list: %d items, %v", len(all.Items), err)
	}
	selected, err := csrs.List(ctx, metav1.ListOptions{FieldSelector: "spec.signerName=example.com/other"})
	if err != nil || len(selected.Items) != 1 || selected.Items[0].Name != "beta" {
		t.Fatalf("list with field selector: %+v, %v", selected, err)
	}
	if _, err := csrs.List(ctx, metav1.ListOptions{FieldSelector: "spec.request=x"}); !apierrors.IsBadRequest(err) {
		t.Fatalf("unsupported field selector: want 400, got %v", err)
	}
	expectEvent(t, w, watch.Added, "alpha", func(*certv1alpha1.CertificateSigningRequest) bool { return true })

	// Approval through /status and through the main resource does nothing.
	viaStatus := got.DeepCopy()
	addCondition(viaStatus, certv1alpha1.CertificateApproved, "ViaStatus")
	if _, err := csrs.UpdateStatus(ctx, viaStatus, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("approval through /status: want 422, got %v", err)
	}
	viaMain := got.DeepCopy()
	addCondition(viaMain, certv1alpha1.CertificateApproved, "ViaMain")
	if updated, err := csrs.Update(ctx, viaMain, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("main resource update: %v", err)
	} else if hasCondition(updated, certv1alpha1.CertificateApproved) {
		t.Fatal("approval through the main resource took effect")
	}
	// A certificate before approval is refused.
	early, _ := csrs.Get(ctx, "alpha", metav1.GetOptions{})
	early.Status.Certificate = fixtures.SelfSignedCertPEM(t, "alpha")
	if _, err := csrs.UpdateStatus(ctx, early, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("certificate before approval: want 422, got %v", err)
	}

	// Approve through /approval.
	current, _ := csrs.Get(ctx, "alpha", metav1.GetOptions{})
	addCondition(current, certv1alpha1.CertificateApproved, "ByTest")
	approved, err := csrs.UpdateApproval(ctx, "alpha", current, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("approve: %v", err)
	}
	if !hasCondition(approved, certv1alpha1.CertificateApproved) || approved.Status.Conditions[0].LastUpdateTime.IsZero() {
		t.Fatalf("approval not stored with a time: %+v", approved.Status)
	}
	expectEvent(t, w, watch.Modified, "alpha", func(c *certv1alpha1.CertificateSigningRequest) bool {
		return hasCondition(c, certv1alpha1.CertificateApproved)
	})
	// Denying an approved request is refused.
	deny := approved.DeepCopy()
	deny.Status.Conditions = nil
	addCondition(deny, certv1alpha1.CertificateDenied, "Late")
	if _, err := csrs.UpdateApproval(ctx, "alpha", deny, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("deny after approve: want 422, got %v", err)
	}

	// Certificate through /status, once.
	cert := fixtures.SelfSignedCertPEM(t, "alpha")
	approved.Status.Certificate = cert
	issued, err := csrs.UpdateStatus(ctx, approved, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("set certificate: %v", err)
	}
	if !bytes.Equal(issued.Status.Certificate, cert) {
		t.Fatal("certificate not stored")
	}
	expectEvent(t, w, watch.Modified, "alpha", func(c *certv1alpha1.CertificateSigningRequest) bool {
		return len(c.Status.Certificate) > 0
	})
	issued.Status.Certificate = fixtures.SelfSignedCertPEM(t, "second")
	if _, err := csrs.UpdateStatus(ctx, issued, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("second certificate: want 422, got %v", err)
	}
	final, _ := csrs.Get(ctx, "alpha", metav1.GetOptions{})
	if !bytes.Equal(final.Status.Certificate, cert) {
		t.Fatal("certificate changed")
	}

	if err := csrs.Delete(ctx, "alpha", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	expectEvent(t, w, watch.Deleted, "alpha", func(*certv1alpha1.CertificateSigningRequest) bool { return true })
	if _, err := csrs.Get(ctx, "alpha", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after delete: want 404, got %v", err)
	}
}

func containsAll(list []string, want ...string) bool {
	for _, w := range want {
		found := false
		for _, l := range list {
			if l == w {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// expectEvent reads w until an event of typ for the request name for
// which ok holds; every event on the way must be a request of
// example.com/watched.
func expectEvent(t *testing.T, w watch.Interface, typ watch.EventType, name string, ok func(*certv1alpha1.CertificateSigningRequest) bool) {
	t.Helper()
	framework.Eventually(t, 30*time.Second, fmt.Sprintf("a %s event for %s", typ, name), func(context.Context) error {
		for {
			var ev watch.Event
			var open bool
			select {
			case ev, open = <-w.ResultChan():
			default:
				return errors.New("not seen yet")
			}
			if !open {
				return framework.Permanent(errors.New("the watch closed"))
			}
			csr, isCSR := ev.Object.(*certv1alpha1.CertificateSigningRequest)
			if !isCSR {
				return framework.Permanent(fmt.Errorf("unexpected watch object %T: %+v", ev.Object, ev.Object))
			}
			if csr.Spec.SignerName != "example.com/watched" {
				return framework.Permanent(fmt.Errorf("field selector let through %s (%s)", csr.Name, csr.Spec.SignerName))
			}
			if ev.Type == typ && csr.Name == name && ok(csr) {
				return nil
			}
		}
	})
}

func TestMalformedRequestsAreRejectedAndNothingIsStored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := framework.StartStandalone(t, t.TempDir())
	csrs := srv.Client.CertificatesV1alpha1().CertificateSigningRequests()
	good := fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "x"})

	tests := map[string]struct {
		mutate    func(*certv1alpha1.CertificateSigningRequest)
		wantField string
	}{
		"not PEM":         {func(c *certv1alpha1.CertificateSigningRequest) { c.Spec.Request = []byte("not pem") }, "spec.request"},
		"wrong PEM type":  {func(c *certv1alpha1.CertificateSigningRequest) { c.Spec.Request = fixtures.SelfSignedCertPEM(t, "x") }, "spec.request"},
		"bad signature":   {func(c *certv1alpha1.CertificateSigningRequest) { c.Spec.Request = fixtures.CorruptSignature(t, good) }, "spec.request"},
		"oversized":       {func(c *certv1alpha1.CertificateSigningRequest) { c.Spec.Request = bytes.Repeat([]byte("A"), 70*1024) }, "spec.request"},
		"bad signer name": {func(c *certv1alpha1.CertificateSigningRequest) { c.Spec.SignerName = "no-slash" }, "spec.signerName"},
		"short duration":  {func(c *certv1alpha1.CertificateSigningRequest) { c.Spec.ExpirationSeconds = ptr.To[int32](60) }, "spec.expirationSeconds"},
		"unknown usage":   {func(c *certv1alpha1.CertificateSigningRequest) { c.Spec.Usages = []certv1alpha1.KeyUsage{"root"} }, "spec.usages[0]"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			csr := newCSR(t, "bad-"+strings.ReplaceAll(name, " ", "-"), "example.com/signer")
			tc.mutate(csr)
			_, err := csrs.Create(ctx, csr, metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want 422 Invalid, got %v", err)
			}
			status, ok := err.(apierrors.APIStatus)
			if !ok || status.Status().Code != 422 {
				t.Fatalf("want HTTP 422, got %v", err)
			}
			found := false
			for _, cause := range status.Status().Details.Causes {
				if cause.Field == tc.wantField {
					found = true
				}
			}
			if !found || !strings.Contains(err.Error(), tc.wantField) {
				t.Fatalf("error does not name %s: %v", tc.wantField, err)
			}
		})
	}
	list, err := csrs.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Fatalf("%d malformed requests were stored", len(list.Items))
	}
}

func TestSystemMastersClientCertificateIsRefused(t *testing.T) {
	t.Parallel()
	srv := framework.StartStandalone(t, t.TempDir())
	csr := newCSR(t, "masters", "rekey.io/kube-apiserver-client")
	csr.Spec.Request = fixtures.CSRPEM(t, fixtures.CSROptions{CommonName: "root", Organizations: []string{"system:masters"}})
	_, err := srv.Client.CertificatesV1alpha1().CertificateSigningRequests().Create(context.Background(), csr, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "system:masters") {
		t.Fatalf("want 403 naming system:masters, got %v", err)
	}
}

func TestRestartKeepsObjects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	first := framework.StartStandalone(t, dir)
	csrs := first.Client.CertificatesV1alpha1().CertificateSigningRequests()
	if _, err := csrs.Create(ctx, newCSR(t, "survivor", "example.com/signer"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	current, _ := csrs.Get(ctx, "survivor", metav1.GetOptions{})
	addCondition(current, certv1alpha1.CertificateApproved, "BeforeRestart")
	if _, err := csrs.UpdateApproval(ctx, "survivor", current, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	caBefore := readFile(t, dir+"/pki/serving-ca.crt")
	first.Stop(t)

	second := framework.StartStandalone(t, dir)
	got, err := second.Client.CertificatesV1alpha1().CertificateSigningRequests().Get(ctx, "survivor", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("after restart: %v", err)
	}
	if !hasCondition(got, certv1alpha1.CertificateApproved) || got.Spec.Username != "rekey-admin" {
		t.Fatalf("object changed across restart: %+v", got)
	}
	if !bytes.Equal(caBefore, readFile(t, dir+"/pki/serving-ca.crt")) {
		t.Fatal("serving CA was regenerated on restart")
	}
}

func TestNonAdminUsersRequestButCannotApprove(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := framework.StartStandalone(t, t.TempDir())
	bob, _ := srv.ClientFor(t, "bob", "devs")
	csrs := bob.CertificatesV1alpha1().CertificateSigningRequests()
	created, err := csrs.Create(ctx, newCSR(t, "bobs", "example.com/signer"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("bob create: %v", err)
	}
	if created.Spec.Username != "bob" || !containsAll(created.Spec.Groups, "devs") {
		t.Fatalf("identity = %q %v", created.Spec.Username, created.Spec.Groups)
	}
	addCondition(created, certv1alpha1.CertificateApproved, "Self")
	if _, err := csrs.UpdateApproval(ctx, "bobs", created, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("bob approving his own request: want 403, got %v", err)
	}
	if _, err := csrs.UpdateStatus(ctx, created, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("bob writing status: want 403, got %v", err)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
