package integration

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/test/fixtures"
	"rekey.io/rekey/test/framework"
)

// certSHA256 is a certificate's name as a Revocation: the SHA-256 of its
// DER in lowercase hex.
func certSHA256(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:])
}

// issueCert has a certificate of signer issued for request name.
func issueCert(t *testing.T, client clientset.Interface, name, signer, cn string) (*x509.Certificate, *certv1alpha1.CertificateSigningRequest) {
	t.Helper()
	createAndApprove(t, client, requestFor(t, name, signer, fixtures.CSROptions{CommonName: cn}, certv1alpha1.UsageClientAuth))
	cert := waitForCertificate(t, client, name)
	csr, err := client.CertificatesV1alpha1().CertificateSigningRequests().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cert, csr
}

func revokeBySHA(ctx context.Context, client clientset.Interface, sha string, reason certv1alpha1.RevocationReason) (*certv1alpha1.Revocation, error) {
	return client.CertificatesV1alpha1().Revocations().Create(ctx, &certv1alpha1.Revocation{
		Spec: certv1alpha1.RevocationSpec{CertificateSHA256: sha, Reason: reason},
	}, metav1.CreateOptions{})
}

// TestRevocation runs Revocations behind a real kube-apiserver with RBAC:
// who may revoke (verb revoke on the certificate's signer, checked against
// the signer rekey found), what the server records, that a certificate is
// revoked once however many ask at once, that the request shows it in a
// condition no client can add or remove, and that no client undoes it.
func TestRevocation(t *testing.T) {
	t.Parallel()
	cluster := kubeCluster(t)
	ctx := context.Background()
	admin, rekey := cluster.Admin, cluster.RekeyAdmin

	// The cluster is shared (kubeCluster): every name here carries "rv".
	const (
		caName = "it-rv"
		signer = "example.com/it-rv"
		settle = 30 * time.Second
	)
	createCAAndSigner(t, rekey, caName, rotationv1alpha1.CertificateAuthoritySpec{CommonName: "it rv CA", KeyAlgorithm: rotationv1alpha1.ECDSAP256})
	t.Cleanup(func() {
		_ = rekey.CertificatesV1alpha1().Signers().Delete(context.Background(), "example.com:"+caName, metav1.DeleteOptions{})
		_ = rekey.RotationV1alpha1().CertificateAuthorities().Delete(context.Background(), caName, metav1.DeleteOptions{})
	})
	roles := []rbacv1.ClusterRole{
		// As artifacts/rbac/revoker.yaml tells operators to copy it.
		{ObjectMeta: metav1.ObjectMeta{Name: "it-rv-revoker"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"certificates.rekey.io"}, Resources: []string{"revocations"}, Verbs: []string{"create", "get", "list", "watch"}},
			{APIGroups: []string{"certificates.rekey.io"}, Resources: []string{"signers"}, ResourceNames: []string{signer}, Verbs: []string{"revoke"}},
		}},
		// May create revocations, revoke for no signer.
		{ObjectMeta: metav1.ObjectMeta{Name: "it-rv-create-only"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"certificates.rekey.io"}, Resources: []string{"revocations"}, Verbs: []string{"create", "get", "list", "watch"}},
		}},
	}
	for _, r := range roles {
		if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &r, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.RbacV1().ClusterRoles().Delete(context.Background(), r.Name, metav1.DeleteOptions{}) })
	}
	bind := func(user, role string) clientset.Interface {
		t.Helper()
		name := "it-rv-" + sanitizeName(user) + "-" + sanitizeName(role)
		if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("binding %s to %s: %v", user, role, err)
		}
		t.Cleanup(func() {
			_ = admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
		c, _, err := cluster.UserClient(user)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	revoker := bind("it-rv-revoker", "it-rv-revoker")
	createOnly := bind("it-rv-nobody", "it-rv-create-only")
	shipped := bind("it-rv-shipped", "rekey:revoker")

	certA, csrA := issueCert(t, rekey, "it-rv-a", signer, "it-rv-alice")
	certB, _ := issueCert(t, rekey, "it-rv-b", signer, "it-rv-bob")
	certC, _ := issueCert(t, rekey, "it-rv-c", signer, "it-rv-carol")
	shaA, shaB, shaC := certSHA256(certA), certSHA256(certB), certSHA256(certC)

	t.Run("a certificate rekey did not issue is not found", func(t *testing.T) {
		unknown := strings.Repeat("0f", 32)
		framework.Eventually(t, settle, "the revoker's binding reaching rekey", func(ctx context.Context) error {
			_, err := revokeBySHA(ctx, revoker, unknown, certv1alpha1.RevocationReasonUnspecified)
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("want 404, got %v", err)
		})
		_, err := revokeBySHA(ctx, revoker, unknown, certv1alpha1.RevocationReasonUnspecified)
		if want := "no certificate rekey issued has SHA-256 " + unknown; err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v, want one with %q", err, want)
		}
	})

	t.Run("revoking needs verb revoke on the certificate's signer", func(t *testing.T) {
		for user, c := range map[string]clientset.Interface{"it-rv-nobody": createOnly, "it-rv-shipped": shipped} {
			framework.Eventually(t, settle, user+" refused by SignerRevocation (not by RBAC on revocations)", func(ctx context.Context) error {
				_, err := revokeBySHA(ctx, c, shaA, certv1alpha1.RevocationReasonKeyCompromise)
				if want := fmt.Sprintf(`user %q may not revoke certificates of signer %q: needs verb "revoke" on resource "signers" in group "certificates.rekey.io" with resourceName %q or "example.com/*"`, user, signer, signer); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
					return fmt.Errorf("want 403 with %q, got %v", want, err)
				}
				return nil
			})
		}
		if _, err := rekey.CertificatesV1alpha1().Revocations().Get(ctx, shaA, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("a refused revocation exists: %v", err)
		}
	})

	var revA *certv1alpha1.Revocation
	t.Run("by SHA-256: the server records what it found", func(t *testing.T) {
		before := time.Now().Add(-time.Minute)
		var err error
		// Any case is accepted; a client's status is replaced.
		revA, err = revoker.CertificatesV1alpha1().Revocations().Create(ctx, &certv1alpha1.Revocation{
			Spec:   certv1alpha1.RevocationSpec{CertificateSHA256: strings.ToUpper(shaA), Reason: certv1alpha1.RevocationReasonKeyCompromise},
			Status: certv1alpha1.RevocationStatus{SignerName: "evil.example.com/x", RevokedBy: "mallory"},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st := revA.Status
		if revA.Name != shaA || st.CertificateSHA256 != shaA || st.SignerName != signer || st.CAName != caName || st.CAKeyID == "" ||
			st.SerialNumber != fmt.Sprintf("%x", certA.SerialNumber) || st.Request != "it-rv-a" || st.RequestUID != string(csrA.UID) ||
			st.RevokedBy != "it-rv-revoker" || !st.NotAfter.Time.Equal(certA.NotAfter) || st.RevocationTime.Time.Before(before) ||
			!strings.Contains(st.Subject, "CN=it-rv-alice") {
			t.Fatalf("revocation %s: %+v", revA.Name, st)
		}
	})

	t.Run("a second revocation of the same certificate is AlreadyExists", func(t *testing.T) {
		_, err := revokeBySHA(ctx, revoker, shaA, certv1alpha1.RevocationReasonSuperseded)
		if !apierrors.IsAlreadyExists(err) {
			t.Fatalf("want AlreadyExists, got %v", err)
		}
		// A client naming the object after another certificate is refused.
		_, err = revoker.CertificatesV1alpha1().Revocations().Create(ctx, &certv1alpha1.Revocation{
			ObjectMeta: metav1.ObjectMeta{Name: shaC},
			Spec:       certv1alpha1.RevocationSpec{CertificateSHA256: shaB, Reason: certv1alpha1.RevocationReasonUnspecified},
		}, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "metadata.name") {
			t.Fatalf("a name of another certificate: %v", err)
		}
	})

	t.Run("by serial number", func(t *testing.T) {
		for _, spec := range []certv1alpha1.RevocationSpec{
			// A serial that is no certificate of this CA.
			{SerialNumber: "0123", CAName: caName, Reason: certv1alpha1.RevocationReasonUnspecified},
		} {
			if _, err := revoker.CertificatesV1alpha1().Revocations().Create(ctx, &certv1alpha1.Revocation{Spec: spec}, metav1.CreateOptions{}); !apierrors.IsNotFound(err) ||
				!strings.Contains(err.Error(), "no certificate rekey issued has serial number 0123 from CA "+caName) {
				t.Fatalf("unknown serial: %v", err)
			}
		}
		rev, err := revoker.CertificatesV1alpha1().Revocations().Create(ctx, &certv1alpha1.Revocation{Spec: certv1alpha1.RevocationSpec{
			SerialNumber: strings.ToUpper(fmt.Sprintf("%x", certB.SerialNumber)), Reason: certv1alpha1.RevocationReasonAffiliationChanged,
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if rev.Name != shaB || rev.Status.Request != "it-rv-b" {
			t.Fatalf("revoked by serial: %s %+v", rev.Name, rev.Status)
		}
	})

	t.Run("concurrent revocations of one certificate: one object, one success", func(t *testing.T) {
		const n = 8
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = revokeBySHA(ctx, revoker, shaC, certv1alpha1.RevocationReasonCessationOfOperation)
			}()
		}
		wg.Wait()
		ok := 0
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case !apierrors.IsAlreadyExists(err):
				t.Fatalf("a concurrent revocation failed otherwise than AlreadyExists: %v", err)
			}
		}
		if ok != 1 {
			t.Fatalf("%d revocations succeeded, want 1 (errors %v)", ok, errs)
		}
		list, err := rekey.CertificatesV1alpha1().Revocations().List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + shaC})
		if err != nil || len(list.Items) != 1 {
			t.Fatalf("revocations of c: %v (err %v)", list, err)
		}
	})

	t.Run("the request shows Revoked, and no client write removes or adds it", func(t *testing.T) {
		var csr *certv1alpha1.CertificateSigningRequest
		framework.Eventually(t, settle, "it-rv-a marked Revoked", func(ctx context.Context) error {
			var err error
			if csr, err = rekey.CertificatesV1alpha1().CertificateSigningRequests().Get(ctx, "it-rv-a", metav1.GetOptions{}); err != nil {
				return err
			}
			if c := certv1alpha1.GetCondition(csr, certv1alpha1.CertificateRevoked); c == nil {
				return errors.New("no Revoked condition yet")
			}
			return nil
		})
		c := certv1alpha1.GetCondition(csr, certv1alpha1.CertificateRevoked)
		if c.Status != metav1.ConditionTrue || c.Reason != "KeyCompromise" || !strings.Contains(c.Message, "revoked by it-rv-revoker at ") {
			t.Fatalf("Revoked condition %+v", c)
		}
		want := *c
		// A cluster admin's /status write without it: the condition stays.
		var kept []certv1alpha1.CertificateSigningRequestCondition
		for _, cond := range csr.Status.Conditions {
			if cond.Type != certv1alpha1.CertificateRevoked {
				kept = append(kept, cond)
			}
		}
		csr.Status.Conditions = kept
		updated, err := rekey.CertificatesV1alpha1().CertificateSigningRequests().UpdateStatus(ctx, csr, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := certv1alpha1.GetCondition(updated, certv1alpha1.CertificateRevoked); got == nil || got.Reason != want.Reason || got.Message != want.Message {
			t.Fatalf("after a /status write without it, Revoked is %+v", got)
		}
		// Adding one to a request no revocation names is refused.
		issueCert(t, rekey, "it-rv-d", signer, "it-rv-dave")
		csrD, err := rekey.CertificatesV1alpha1().CertificateSigningRequests().Get(ctx, "it-rv-d", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		csrD.Status.Conditions = append(csrD.Status.Conditions, certv1alpha1.CertificateSigningRequestCondition{Type: certv1alpha1.CertificateRevoked, Status: metav1.ConditionTrue, Reason: "KeyCompromise"})
		if _, err := rekey.CertificatesV1alpha1().CertificateSigningRequests().UpdateStatus(ctx, csrD, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), `a condition of type "Revoked" is recorded by rekey`) {
			t.Fatalf("a client adding Revoked: %v", err)
		}
	})

	t.Run("no client undoes or changes a revocation", func(t *testing.T) {
		rc := rekey.CertificatesV1alpha1().RESTClient()
		err := rc.Delete().Resource("revocations").Name(shaA).Do(ctx).Error()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "a revocation is not undone") {
			t.Fatalf("a cluster admin's delete: %v", err)
		}
		err = rc.Delete().Resource("revocations").Do(ctx).Error()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "a revocation is not undone") {
			t.Fatalf("a cluster admin's deletecollection: %v", err)
		}
		cur, err := rekey.CertificatesV1alpha1().Revocations().Get(ctx, shaA, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Spec.Reason = certv1alpha1.RevocationReasonSuperseded
		err = rc.Put().Resource("revocations").Name(shaA).Body(cur).Do(ctx).Error()
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec") {
			t.Fatalf("a spec change: %v", err)
		}
		cur.Spec.Reason = certv1alpha1.RevocationReasonKeyCompromise
		cur.Labels = map[string]string{"ticket": "it-rv-1"}
		cur.Status.RevokedBy = "mallory"
		var out certv1alpha1.Revocation
		if err := rc.Put().Resource("revocations").Name(shaA).Body(cur).Do(ctx).Into(&out); err != nil {
			t.Fatalf("a label change: %v", err)
		}
		if out.Labels["ticket"] != "it-rv-1" || out.Status.RevokedBy != "it-rv-revoker" {
			t.Fatalf("after an update: labels %v, revokedBy %q", out.Labels, out.Status.RevokedBy)
		}
	})
}

// TestRevocationSurvivesRestartsAndGoesWithItsKey: a revocation is in
// etcd (a restarted server has it and a repeat is AlreadyExists), and a
// rotation's Complete, which destroys the previous key, deletes that key's
// revocations (and its records: its certificates can no longer be revoked)
// while the new key's stay.
func TestRevocationSurvivesRestartsAndGoesWithItsKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := framework.StartStandalone(t, dir)
	ctx := context.Background()
	createCAAndSigner(t, srv.Client, "rvrot", rotationv1alpha1.CertificateAuthoritySpec{CommonName: "rvrot CA", KeyAlgorithm: rotationv1alpha1.ECDSAP256, Rotation: framework.ImmediateRotation()})
	oldA, _ := issueCert(t, srv.Client, "old-a", "example.com/rvrot", "a")
	oldB, _ := issueCert(t, srv.Client, "old-b", "example.com/rvrot", "b")
	first, err := revokeBySHA(ctx, srv.Client, certSHA256(oldA), certv1alpha1.RevocationReasonKeyCompromise)
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop(t)

	srv = framework.StartStandalone(t, dir)
	client := srv.Client
	got, err := client.CertificatesV1alpha1().Revocations().Get(ctx, first.Name, metav1.GetOptions{})
	if err != nil || got.UID != first.UID || got.Status != first.Status {
		t.Fatalf("after a restart: %+v (err %v), want %+v", got, err, first)
	}
	if _, err := revokeBySHA(ctx, client, certSHA256(oldA), certv1alpha1.RevocationReasonKeyCompromise); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("revoking again after a restart: %v", err)
	}

	if _, err := client.RotationV1alpha1().CertificateAuthorities().Rotate(ctx, "rvrot", &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationStart}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForPhase(t, client, "rvrot", rotationv1alpha1.PhasePrepared)
	newA, _ := issueCert(t, client, "new-a", "example.com/rvrot", "a")
	second, err := revokeBySHA(ctx, client, certSHA256(newA), certv1alpha1.RevocationReasonSuperseded)
	if err != nil {
		t.Fatal(err)
	}
	if second.Status.CAKeyID == first.Status.CAKeyID {
		t.Fatalf("both revocations name key %s", first.Status.CAKeyID)
	}
	if _, err := client.RotationV1alpha1().CertificateAuthorities().Rotate(ctx, "rvrot", &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationComplete, Force: true}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Complete deletes them before it reports Completed.
	waitForPhase(t, client, "rvrot", rotationv1alpha1.PhaseCompleted)
	if _, err := client.CertificatesV1alpha1().Revocations().Get(ctx, first.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the revocation of destroyed key %s: %v, want NotFound", first.Status.CAKeyID, err)
	}
	if _, err := client.CertificatesV1alpha1().Revocations().Get(ctx, second.Name, metav1.GetOptions{}); err != nil {
		t.Fatalf("the revocation of the current key: %v", err)
	}
	_, err = revokeBySHA(ctx, client, certSHA256(oldB), certv1alpha1.RevocationReasonKeyCompromise)
	if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), "no certificate rekey issued has SHA-256") {
		t.Fatalf("revoking a certificate of the destroyed key: %v", err)
	}
}
