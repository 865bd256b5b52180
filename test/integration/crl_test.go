package integration

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/crl"
	"rekey.io/rekey/test/fixtures"
	"rekey.io/rekey/test/framework"
)

// TestCRL runs a standalone rekey (embedded etcd) with --crl-validity=2m:
// a Signer with a CRL distribution point puts the URL of its CA key's CRL,
// filled in, into what it issues; that URL answers without credentials
// with a CRL signed by the CA that lists a certificate once it is revoked
// (and not another of the same signer), which openssl's -crl_check then
// refuses; and the CRL is renewed before its nextUpdate.
func TestCRL(t *testing.T) {
	t.Parallel()
	srv := framework.StartStandalone(t, t.TempDir(), "--crl-validity=2m")
	client := srv.Client
	ctx := context.Background()
	const (
		caName     = "it-crl"
		signerName = "example.com/it-crl"
	)
	base := fmt.Sprintf("https://127.0.0.1:%d", srv.Port)
	if _, err := client.RotationV1alpha1().CertificateAuthorities().Create(ctx, &rotationv1alpha1.CertificateAuthority{
		ObjectMeta: metav1.ObjectMeta{Name: caName},
		Spec:       rotationv1alpha1.CertificateAuthoritySpec{CommonName: "it crl CA", KeyAlgorithm: rotationv1alpha1.ECDSAP256},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CertificatesV1alpha1().Signers().Create(ctx, &certv1alpha1.Signer{
		ObjectMeta: metav1.ObjectMeta{Name: "example.com:it-crl"},
		Spec: certv1alpha1.SignerSpec{
			SignerName:              signerName,
			CertificateAuthorityRef: certv1alpha1.CertificateAuthorityReference{Name: caName},
			Policy: certv1alpha1.SignerPolicy{
				AllowedUsages:         []certv1alpha1.KeyUsage{certv1alpha1.UsageClientAuth, certv1alpha1.UsageDigitalSignature},
				MaxDuration:           metav1.Duration{Duration: 24 * time.Hour},
				CRLDistributionPoints: []string{base + "/crl/$(caName)/$(keyID)", "http://crl.example.com/$(caName).crl"},
			},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	caCert := caOf(t, client, caName)
	ca, err := client.RotationV1alpha1().CertificateAuthorities().Get(ctx, caName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	keyID := ca.Status.Current.KeyID
	if keyID == "" {
		t.Fatal("the CA's status names no key ID")
	}

	issue := func(name, cn string) *x509.Certificate {
		t.Helper()
		createAndApprove(t, client, requestFor(t, name, signerName, fixtures.CSROptions{CommonName: cn}, certv1alpha1.UsageClientAuth))
		return waitForCertificate(t, client, name)
	}
	revoked, kept := issue("it-crl-a", "it-crl-alice"), issue("it-crl-b", "it-crl-bob")

	wantCDP := []string{base + "/crl/" + caName + "/" + keyID, "http://crl.example.com/" + caName + ".crl"}
	if strings.Join(revoked.CRLDistributionPoints, " ") != strings.Join(wantCDP, " ") {
		t.Fatalf("CRL distribution points %q, want %q", revoked.CRLDistributionPoints, wantCDP)
	}

	// No credentials: only the serving CA, to trust rekey's certificate.
	anonymous, err := rest.HTTPClientFor(rest.AnonymousClientConfig(srv.Config))
	if err != nil {
		t.Fatal(err)
	}
	fetch := func(ctx context.Context, url string) (*x509.RevocationList, []byte, http.Header, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return nil, nil, nil, err
		}
		resp, err := anonymous.Do(req)
		if err != nil {
			return nil, nil, nil, err
		}
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return nil, nil, nil, err
		}
		if resp.StatusCode != http.StatusOK {
			return nil, nil, resp.Header, fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, body)
		}
		if ct := resp.Header.Get("Content-Type"); ct != crl.ContentType {
			return nil, nil, nil, framework.Permanent(fmt.Errorf("GET %s: Content-Type %q, want %s", url, ct, crl.ContentType))
		}
		rl, err := x509.ParseRevocationList(body)
		if err != nil {
			return nil, nil, nil, framework.Permanent(fmt.Errorf("GET %s: the CRL does not parse: %w", url, err))
		}
		if err := rl.CheckSignatureFrom(caCert); err != nil {
			return nil, nil, nil, framework.Permanent(fmt.Errorf("GET %s: the CRL does not verify against the CA: %w", url, err))
		}
		if now := time.Now(); !now.Before(rl.NextUpdate) {
			return nil, nil, nil, framework.Permanent(fmt.Errorf("GET %s: served a CRL past its nextUpdate %s", url, rl.NextUpdate))
		}
		return rl, body, resp.Header, nil
	}
	listed := func(rl *x509.RevocationList, c *x509.Certificate) *x509.RevocationListEntry {
		for i := range rl.RevokedCertificateEntries {
			if e := &rl.RevokedCertificateEntries[i]; e.SerialNumber.Cmp(c.SerialNumber) == 0 {
				return e
			}
		}
		return nil
	}

	first, _, header, err := fetch(ctx, base+"/crl/"+caName)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.RevokedCertificateEntries) != 0 {
		t.Fatalf("a CRL lists %d certificates before any was revoked", len(first.RevokedCertificateEntries))
	}
	if got := first.NextUpdate.Sub(first.ThisUpdate); got != 2*time.Minute+crl.Backdate {
		t.Errorf("nextUpdate - thisUpdate = %s, want --crl-validity 2m plus the %s backdate", got, crl.Backdate)
	}
	if age, err := strconv.Atoi(strings.TrimPrefix(header.Get("Cache-Control"), "public, max-age=")); err != nil || time.Duration(age)*time.Second > time.Until(first.NextUpdate) {
		t.Errorf("Cache-Control %q: want a max-age before nextUpdate", header.Get("Cache-Control"))
	}

	if _, err := client.CertificatesV1alpha1().Revocations().Create(ctx, &certv1alpha1.Revocation{
		Spec: certv1alpha1.RevocationSpec{CertificateSHA256: certSHA256(revoked), Reason: certv1alpha1.RevocationReasonKeyCompromise},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("revoking: %v", err)
	}
	// The URL the certificate names, fetched as a relying party would.
	var withEntry *x509.RevocationList
	var withEntryDER []byte
	framework.Eventually(t, 10*time.Second, "the revoked certificate in the CRL at its distribution point", func(ctx context.Context) error {
		rl, der, _, err := fetch(ctx, revoked.CRLDistributionPoints[0])
		if err != nil {
			return err
		}
		e := listed(rl, revoked)
		if e == nil {
			return fmt.Errorf("CRL number %s does not list serial %x", rl.Number, revoked.SerialNumber)
		}
		if e.ReasonCode != 1 {
			return framework.Permanent(fmt.Errorf("reason code %d, want 1 (keyCompromise)", e.ReasonCode))
		}
		if listed(rl, kept) != nil {
			return framework.Permanent(fmt.Errorf("the certificate not revoked is listed"))
		}
		if rl.Number.Cmp(first.Number) <= 0 {
			return framework.Permanent(fmt.Errorf("CRL number %s not above the first's %s", rl.Number, first.Number))
		}
		withEntry, withEntryDER = rl, der
		return nil
	})
	if rl, _, _, err := fetch(ctx, base+"/crl/"+caName); err != nil || listed(rl, revoked) == nil {
		t.Fatalf("/crl/%s (the current key's): %v, or the revoked certificate not listed", caName, err)
	}
	for _, path := range []string{"/crl/no-such-ca", "/crl/" + caName + "/no-such-key", "/crl/" + caName + "/" + keyID + "/x"} {
		if _, _, _, err := fetch(ctx, base+path); err == nil || !strings.Contains(err.Error(), ": 404 ") {
			t.Errorf("GET %s: %v, want 404", path, err)
		}
	}

	t.Run("openssl -crl_check", func(t *testing.T) {
		dir := t.TempDir()
		write := func(name string, data []byte) string {
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, data, 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}
		certPEM := func(c *x509.Certificate) []byte {
			return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
		}
		caFile, der := write("ca.pem", certPEM(caCert)), write("crl.der", withEntryDER)
		crlPEM := filepath.Join(dir, "crl.pem")
		if out, err := exec.Command("openssl", "crl", "-inform", "DER", "-in", der, "-out", crlPEM).CombinedOutput(); err != nil {
			t.Fatalf("openssl crl: %v\n%s", err, out)
		}
		verify := func(c *x509.Certificate, name string) (string, error) {
			out, err := exec.Command("openssl", "verify", "-crl_check", "-CRLfile", crlPEM, "-CAfile", caFile, write(name, certPEM(c))).CombinedOutput()
			return string(out), err
		}
		if out, err := verify(revoked, "revoked.pem"); err == nil || !strings.Contains(out, "certificate revoked") {
			t.Fatalf("openssl verify accepted the revoked certificate (%v):\n%s", err, out)
		}
		if out, err := verify(kept, "kept.pem"); err != nil || !strings.Contains(out, ": OK") {
			t.Fatalf("openssl verify refused the certificate not revoked (%v):\n%s", err, out)
		}
	})

	t.Run("renewed before nextUpdate", func(t *testing.T) {
		// Re-issued at half the validity (1m) with nothing changed; every
		// CRL served meanwhile is valid (fetch checks nextUpdate).
		framework.Eventually(t, 2*time.Minute, "a CRL with a later thisUpdate", func(ctx context.Context) error {
			rl, _, _, err := fetch(ctx, base+"/crl/"+caName+"/"+keyID)
			if err != nil {
				return err
			}
			if !rl.ThisUpdate.After(withEntry.ThisUpdate) {
				return fmt.Errorf("thisUpdate still %s", rl.ThisUpdate)
			}
			if !time.Now().Before(withEntry.NextUpdate) {
				return framework.Permanent(fmt.Errorf("renewed only at or after the last one's nextUpdate %s", withEntry.NextUpdate))
			}
			if rl.Number.Cmp(withEntry.Number) <= 0 || listed(rl, revoked) == nil {
				return framework.Permanent(fmt.Errorf("renewed CRL number %s (after %s), revoked certificate listed: %v", rl.Number, withEntry.Number, listed(rl, revoked) != nil))
			}
			return nil
		})
	})
}

// TestCRLPublishedInConfigMaps: with a host cluster, a CA that publishes
// ConfigMaps gets its current key's CRL beside the bundle (binaryData
// ca.crl), and a revocation reaches it.
func TestCRLPublishedInConfigMaps(t *testing.T) {
	t.Parallel()
	cluster := kubeCluster(t)
	ctx := context.Background()
	admin, rekey := cluster.Admin, cluster.RekeyAdmin
	const (
		caName     = "it-crlpub"
		signerName = "example.com/it-crlpub"
		namespace  = "default"
	)
	if _, err := rekey.RotationV1alpha1().CertificateAuthorities().Create(ctx, &rotationv1alpha1.CertificateAuthority{
		ObjectMeta: metav1.ObjectMeta{Name: caName},
		Spec: rotationv1alpha1.CertificateAuthoritySpec{CommonName: "it crlpub CA", KeyAlgorithm: rotationv1alpha1.ECDSAP256,
			Publish: &rotationv1alpha1.Publish{ConfigMaps: &rotationv1alpha1.ConfigMapPublish{Namespaces: []string{namespace}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = rekey.CertificatesV1alpha1().Signers().Delete(context.Background(), "example.com:"+caName, metav1.DeleteOptions{})
		_ = rekey.RotationV1alpha1().CertificateAuthorities().Delete(context.Background(), caName, metav1.DeleteOptions{})
	})
	if _, err := rekey.CertificatesV1alpha1().Signers().Create(ctx, &certv1alpha1.Signer{
		ObjectMeta: metav1.ObjectMeta{Name: "example.com:" + caName},
		Spec: certv1alpha1.SignerSpec{SignerName: signerName, CertificateAuthorityRef: certv1alpha1.CertificateAuthorityReference{Name: caName},
			Policy: certv1alpha1.SignerPolicy{AllowedUsages: []certv1alpha1.KeyUsage{certv1alpha1.UsageClientAuth, certv1alpha1.UsageDigitalSignature},
				MaxDuration: metav1.Duration{Duration: 24 * time.Hour}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	caCert := caOf(t, rekey, caName)
	createAndApprove(t, rekey, requestFor(t, "it-crlpub-a", signerName, fixtures.CSROptions{CommonName: "it-crlpub-alice"}, certv1alpha1.UsageClientAuth))
	cert := waitForCertificate(t, rekey, "it-crlpub-a")
	if _, err := rekey.CertificatesV1alpha1().Revocations().Create(ctx, &certv1alpha1.Revocation{
		Spec: certv1alpha1.RevocationSpec{CertificateSHA256: certSHA256(cert), Reason: certv1alpha1.RevocationReasonSuperseded},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("revoking: %v", err)
	}
	framework.Eventually(t, 60*time.Second, "the revoked certificate in the published ca.crl", func(ctx context.Context) error {
		cm, err := admin.CoreV1().ConfigMaps(namespace).Get(ctx, caName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		der, ok := cm.BinaryData["ca.crl"]
		if !ok {
			return fmt.Errorf("ConfigMap %s/%s has no ca.crl (keys %v)", namespace, caName, cm.BinaryData)
		}
		if cm.Data["ca.crt"] == "" {
			return framework.Permanent(fmt.Errorf("ConfigMap %s/%s lost its bundle", namespace, caName))
		}
		rl, err := x509.ParseRevocationList(der)
		if err != nil {
			return framework.Permanent(fmt.Errorf("ca.crl does not parse: %w", err))
		}
		if err := rl.CheckSignatureFrom(caCert); err != nil {
			return framework.Permanent(fmt.Errorf("ca.crl does not verify against the CA: %w", err))
		}
		for _, e := range rl.RevokedCertificateEntries {
			if e.SerialNumber.Cmp(cert.SerialNumber) == 0 {
				if e.ReasonCode != 4 {
					return framework.Permanent(fmt.Errorf("reason code %d, want 4 (superseded)", e.ReasonCode))
				}
				return nil
			}
		}
		return fmt.Errorf("ca.crl (number %s) does not list serial %x yet", rl.Number, cert.SerialNumber)
	})
}

// TestCRLPublishedAcrossARotation: while a rotation has both keys trusted
// (Prepared), the ConfigMap's ca-crl.pem holds the previous key's CRL as
// well as the current key's, so that openssl -crl_check with the
// published ca.crt and ca-crl.pem accepts a certificate of either key and
// refuses one of the previous key that was revoked meanwhile (with the
// current key's CRL alone it refused every certificate of the previous
// key: "CRL signature failure"). After Complete the previous key's CRL is
// gone from the ConfigMap and its URL answers 404.
func TestCRLPublishedAcrossARotation(t *testing.T) {
	t.Parallel()
	cluster := kubeCluster(t)
	ctx := context.Background()
	admin, rekey := cluster.Admin, cluster.RekeyAdmin
	const (
		caName     = "it-crlrot"
		signerName = "example.com/it-crlrot"
		namespace  = "default"
	)
	if _, err := rekey.RotationV1alpha1().CertificateAuthorities().Create(ctx, &rotationv1alpha1.CertificateAuthority{
		ObjectMeta: metav1.ObjectMeta{Name: caName},
		Spec: rotationv1alpha1.CertificateAuthoritySpec{CommonName: "it crlrot CA", KeyAlgorithm: rotationv1alpha1.ECDSAP256,
			Rotation: framework.ImmediateRotation(),
			Publish:  &rotationv1alpha1.Publish{ConfigMaps: &rotationv1alpha1.ConfigMapPublish{Namespaces: []string{namespace}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = rekey.CertificatesV1alpha1().Signers().Delete(context.Background(), "example.com:"+caName, metav1.DeleteOptions{})
		_ = rekey.RotationV1alpha1().CertificateAuthorities().Delete(context.Background(), caName, metav1.DeleteOptions{})
	})
	if _, err := rekey.CertificatesV1alpha1().Signers().Create(ctx, &certv1alpha1.Signer{
		ObjectMeta: metav1.ObjectMeta{Name: "example.com:" + caName},
		Spec: certv1alpha1.SignerSpec{SignerName: signerName, CertificateAuthorityRef: certv1alpha1.CertificateAuthorityReference{Name: caName},
			Policy: certv1alpha1.SignerPolicy{AllowedUsages: []certv1alpha1.KeyUsage{certv1alpha1.UsageClientAuth, certv1alpha1.UsageDigitalSignature},
				MaxDuration: metav1.Duration{Duration: 24 * time.Hour}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	caOf(t, rekey, caName)
	oldRevoked, _ := issueCert(t, rekey, "it-crlrot-old-a", signerName, "it-crlrot-a")
	oldKept, _ := issueCert(t, rekey, "it-crlrot-old-b", signerName, "it-crlrot-b")

	if _, err := rekey.RotationV1alpha1().CertificateAuthorities().Rotate(ctx, caName, &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationStart}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	prepared := waitForPhase(t, rekey, caName, rotationv1alpha1.PhasePrepared)
	if prepared.Status.Previous == nil || prepared.Status.Previous.KeyID == "" {
		t.Fatalf("a Prepared CA without a previous key: %+v", prepared.Status)
	}
	oldKeyID := prepared.Status.Previous.KeyID
	newCert, _ := issueCert(t, rekey, "it-crlrot-new-c", signerName, "it-crlrot-c")
	if _, err := revokeBySHA(ctx, rekey, certSHA256(oldRevoked), certv1alpha1.RevocationReasonKeyCompromise); err != nil {
		t.Fatalf("revoking a certificate of the previous key: %v", err)
	}

	dir := t.TempDir()
	write := func(name string, data []byte) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	certFile := func(name string, c *x509.Certificate) string {
		return write(name, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}))
	}
	revokedFile, keptFile, newFile := certFile("old-revoked.pem", oldRevoked), certFile("old-kept.pem", oldKept), certFile("new.pem", newCert)
	// The published files, as a pod that mounts the ConfigMap sees them.
	published := func(ctx context.Context) (caFile, crlFile string, crls int, err error) {
		cm, err := admin.CoreV1().ConfigMaps(namespace).Get(ctx, caName, metav1.GetOptions{})
		if err != nil {
			return "", "", 0, err
		}
		crlPEM, ok := cm.Data["ca-crl.pem"]
		if !ok {
			return "", "", 0, fmt.Errorf("ConfigMap %s/%s has no ca-crl.pem (data keys %v)", namespace, caName, mapKeys(cm.Data))
		}
		for rest := []byte(crlPEM); ; crls++ {
			var block *pem.Block
			if block, rest = pem.Decode(rest); block == nil {
				break
			}
		}
		return write("ca.crt", []byte(cm.Data["ca.crt"])), write("ca-crl.pem", []byte(crlPEM)), crls, nil
	}
	verify := func(caFile, crlFile, certFile string) (string, error) {
		out, err := exec.Command("openssl", "verify", "-crl_check", "-CAfile", caFile, "-CRLfile", crlFile, certFile).CombinedOutput()
		return string(out), err
	}
	framework.Eventually(t, 60*time.Second, "openssl -crl_check with the published ca.crt and ca-crl.pem: both keys' certificates accepted, the revoked one of the previous key refused", func(ctx context.Context) error {
		caFile, crlFile, n, err := published(ctx)
		if err != nil {
			return err
		}
		if n != 2 {
			return fmt.Errorf("ca-crl.pem holds %d CRLs, want the current and the previous key's", n)
		}
		if out, err := verify(caFile, crlFile, revokedFile); err == nil || !strings.Contains(out, "certificate revoked") {
			return fmt.Errorf("the revoked certificate of the previous key (%v):\n%s", err, out)
		}
		for name, f := range map[string]string{"the previous key's certificate not revoked": keptFile, "the current key's certificate": newFile} {
			if out, err := verify(caFile, crlFile, f); err != nil || !strings.Contains(out, ": OK") {
				return fmt.Errorf("%s refused (%v):\n%s", name, err, out)
			}
		}
		return nil
	})

	anonymous, err := rest.HTTPClientFor(rest.AnonymousClientConfig(cluster.DirectToRekey(&rest.Config{})))
	if err != nil {
		t.Fatal(err)
	}
	oldKeyCRL := func(ctx context.Context) (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d/crl/%s/%s", cluster.RekeyPort, caName, oldKeyID), nil)
		if err != nil {
			return 0, err
		}
		resp, err := anonymous.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := oldKeyCRL(ctx); err != nil || code != http.StatusOK {
		t.Fatalf("GET /crl/%s/%s during the rotation: %d %v, want 200", caName, oldKeyID, code, err)
	}

	if _, err := rekey.RotationV1alpha1().CertificateAuthorities().Rotate(ctx, caName, &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationComplete, Force: true}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForPhase(t, rekey, caName, rotationv1alpha1.PhaseCompleted)
	framework.Eventually(t, 60*time.Second, "the destroyed key's CRL gone from ca-crl.pem and /crl/"+caName+"/"+oldKeyID, func(ctx context.Context) error {
		caFile, crlFile, n, err := published(ctx)
		if err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("ca-crl.pem holds %d CRLs, want the current key's alone", n)
		}
		if out, err := verify(caFile, crlFile, newFile); err != nil || !strings.Contains(out, ": OK") {
			return framework.Permanent(fmt.Errorf("the current key's certificate refused after Complete (%v):\n%s", err, out))
		}
		if code, err := oldKeyCRL(ctx); err != nil || code != http.StatusNotFound {
			return fmt.Errorf("GET /crl/%s/%s: %d %v, want 404", caName, oldKeyID, code, err)
		}
		return nil
	})
}

// mapKeys are a map's keys, for messages.
func mapKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
