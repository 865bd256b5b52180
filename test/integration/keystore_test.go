package integration

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/pki"
	"rekey.io/rekey/pkg/policy"
	"rekey.io/rekey/test/fixtures"
	"rekey.io/rekey/test/framework"
)

func writeCA(t *testing.T, dir, cn string) *pki.KeyPair {
	t.Helper()
	ca, err := pki.NewCA(cn, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Write(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")); err != nil {
		t.Fatal(err)
	}
	return ca
}

func TestFileKeyStorePicksUpAReplacedCAWithoutRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := framework.StartStandalone(t, t.TempDir(), "--file-keystore-dir="+dir)
	client := srv.Client
	first := writeCA(t, dir, "adopted-1")
	createCAAndSigner(t, client, "adopted", rotationv1alpha1.CertificateAuthoritySpec{
		KeyAlgorithm: rotationv1alpha1.ECDSAP256,
		KeyStore: rotationv1alpha1.KeyStore{Type: rotationv1alpha1.KeyStoreFile, File: &rotationv1alpha1.FileKeyStore{
			CertFile: filepath.Join(dir, "ca.crt"), KeyFile: filepath.Join(dir, "ca.key")}},
	})
	createAndApprove(t, client, requestFor(t, "file-1", "example.com/adopted", fixtures.CSROptions{CommonName: "x"}, certv1alpha1.UsageClientAuth))
	verifyChain(t, waitForCertificate(t, client, "file-1"), first.Cert, x509.ExtKeyUsageClientAuth)

	second := writeCA(t, dir, "adopted-2")
	createAndApprove(t, client, requestFor(t, "file-2", "example.com/adopted", fixtures.CSROptions{CommonName: "y"}, certv1alpha1.UsageClientAuth))
	leaf := waitForCertificate(t, client, "file-2")
	verifyChain(t, leaf, second.Cert, x509.ExtKeyUsageClientAuth)
	if leaf.Issuer.CommonName != "adopted-2" {
		t.Fatalf("issuer = %s", leaf.Issuer.CommonName)
	}
	// The CA's status follows the file too.
	framework.Eventually(t, 30*time.Second, "the CA status shows the replacing certificate", func(ctx context.Context) error {
		ca, err := client.RotationV1alpha1().CertificateAuthorities().Get(ctx, "adopted", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ca.Status.Current == nil || !strings.Contains(ca.Status.TrustBundle, string(second.CertPEM()[30:80])) {
			return errors.New("it still shows the replaced one")
		}
		return nil
	})
}

func TestPKCS11KeyStoreSignsThroughSoftHSM(t *testing.T) {
	t.Parallel()
	const module = "/usr/lib/softhsm/libsofthsm2.so"
	if _, err := os.Stat(module); err != nil {
		t.Fatalf("SoftHSM2 is not installed (hack/install-test-deps.sh installs it): %v", err)
	}
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.MkdirAll(tokens, 0o700); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "softhsm2.conf")
	if err := os.WriteFile(conf, []byte("directories.tokendir = "+tokens+"\nobjectstore.backend = file\nlog.level = ERROR\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("softhsm2-util", "--init-token", "--free", "--label", "rekey-test", "--pin", "1234", "--so-pin", "5678")
	cmd.Env = append(os.Environ(), "SOFTHSM2_CONF="+conf)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("softhsm2-util: %v\n%s", err, out)
	}
	pinFile := filepath.Join(dir, "pin")
	if err := os.WriteFile(pinFile, []byte("1234\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	srv := framework.StartStandaloneWithEnv(t, t.TempDir(), []string{"SOFTHSM2_CONF=" + conf},
		"--pkcs11-module="+module, "--file-keystore-dir="+dir)
	client := srv.Client
	for _, alg := range []rotationv1alpha1.KeyAlgorithm{rotationv1alpha1.ECDSAP256, rotationv1alpha1.RSA2048} {
		name := "hsm-" + strings.ToLower(string(alg))
		createCAAndSigner(t, client, name, rotationv1alpha1.CertificateAuthoritySpec{
			CommonName: name, KeyAlgorithm: alg,
			KeyStore: rotationv1alpha1.KeyStore{Type: rotationv1alpha1.KeyStorePKCS11, Pkcs11: &rotationv1alpha1.PKCS11KeyStore{
				ModulePath: module, TokenLabel: "rekey-test", PINFile: pinFile}},
		})
		createAndApprove(t, client, requestFor(t, name+"-req", "example.com/"+name, fixtures.CSROptions{CommonName: "x"}, certv1alpha1.UsageClientAuth))
		verifyChain(t, waitForCertificate(t, client, name+"-req"), caOf(t, client, name), x509.ExtKeyUsageClientAuth)
	}
	// The key lives in the token: listing its objects shows it.
	listObjects := func() string {
		list := exec.Command("pkcs11-tool", "--module", module, "--token-label", "rekey-test", "--login", "--pin", "1234", "--list-objects")
		list.Env = append(os.Environ(), "SOFTHSM2_CONF="+conf)
		out, err := list.CombinedOutput()
		if err != nil {
			t.Fatalf("pkcs11-tool: %v\n%s", err, out)
		}
		return string(out)
	}
	ca, err := client.RotationV1alpha1().CertificateAuthorities().Get(context.Background(), "hsm-ecdsa-p256", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	oldKey := ca.Status.Current.KeyID
	if !strings.Contains(listObjects(), oldKey) {
		t.Fatalf("token does not list the CA key %s", oldKey)
	}

	// A rotation makes the new key in the token and destroys the old one there.
	ctx := context.Background()
	if err := framework.SetImmediateRotation(ctx, client, "hsm-ecdsa-p256"); err != nil {
		t.Fatal(err)
	}
	if _, err := client.RotationV1alpha1().CertificateAuthorities().Rotate(ctx, "hsm-ecdsa-p256", &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationStart}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	prepared := waitForPhase(t, client, "hsm-ecdsa-p256", rotationv1alpha1.PhasePrepared)
	newKey := prepared.Status.Current.KeyID
	if objects := listObjects(); !strings.Contains(objects, newKey) || !strings.Contains(objects, oldKey) {
		t.Fatalf("during the rotation the token must hold %s and %s:\n%s", oldKey, newKey, objects)
	}
	createAndApprove(t, client, requestFor(t, "hsm-after", "example.com/hsm-ecdsa-p256", fixtures.CSROptions{CommonName: "y"}, certv1alpha1.UsageClientAuth))
	verifyChain(t, waitForCertificate(t, client, "hsm-after"), caOf(t, client, "hsm-ecdsa-p256"), x509.ExtKeyUsageClientAuth)
	if _, err := client.RotationV1alpha1().CertificateAuthorities().Rotate(ctx, "hsm-ecdsa-p256", &rotationv1alpha1.Rotation{Action: rotationv1alpha1.RotationComplete, Force: true}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForPhase(t, client, "hsm-ecdsa-p256", rotationv1alpha1.PhaseCompleted)
	if objects := listObjects(); strings.Contains(objects, oldKey) || !strings.Contains(objects, newKey) {
		t.Fatalf("after the rotation the token must hold %s only:\n%s", newKey, objects)
	}
}

// TestKeyStorePathsAreAllowListed: a CertificateAuthority may name only the
// PKCS#11 modules and files the server was started with; loading a module
// runs its code in the server.
func TestKeyStorePathsAreAllowListed(t *testing.T) {
	t.Parallel()
	allowed := t.TempDir()
	writeCA(t, allowed, "allowed")
	outside := t.TempDir()
	writeCA(t, outside, "outside")
	srv := framework.StartStandalone(t, t.TempDir(), "--file-keystore-dir="+allowed, "--pkcs11-module=/usr/lib/softhsm/libsofthsm2.so")
	cas := srv.Client.RotationV1alpha1().CertificateAuthorities()
	ctx := context.Background()
	create := func(name string, ks rotationv1alpha1.KeyStore) error {
		_, err := cas.Create(ctx, &rotationv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: rotationv1alpha1.CertificateAuthoritySpec{CommonName: name, KeyAlgorithm: rotationv1alpha1.ECDSAP256, KeyStore: ks}}, metav1.CreateOptions{})
		return err
	}
	for name, tc := range map[string]struct {
		ks        rotationv1alpha1.KeyStore
		wantField string
	}{
		"file-outside": {ks: rotationv1alpha1.KeyStore{Type: rotationv1alpha1.KeyStoreFile, File: &rotationv1alpha1.FileKeyStore{
			CertFile: filepath.Join(allowed, "ca.crt"), KeyFile: filepath.Join(outside, "ca.key")}}, wantField: "spec.keyStore.file.keyFile"},
		"file-dotdot": {ks: rotationv1alpha1.KeyStore{Type: rotationv1alpha1.KeyStoreFile, File: &rotationv1alpha1.FileKeyStore{
			CertFile: filepath.Join(allowed, "ca.crt"), KeyFile: allowed + "/../" + filepath.Base(outside) + "/ca.key"}}, wantField: "spec.keyStore.file.keyFile"},
		"module-not-listed": {ks: rotationv1alpha1.KeyStore{Type: rotationv1alpha1.KeyStorePKCS11, Pkcs11: &rotationv1alpha1.PKCS11KeyStore{
			ModulePath: "/tmp/evil.so", TokenLabel: "x", PINFile: filepath.Join(allowed, "pin")}}, wantField: "spec.keyStore.pkcs11.modulePath"},
		"pin-outside": {ks: rotationv1alpha1.KeyStore{Type: rotationv1alpha1.KeyStorePKCS11, Pkcs11: &rotationv1alpha1.PKCS11KeyStore{
			ModulePath: "/usr/lib/softhsm/libsofthsm2.so", TokenLabel: "x", PINFile: filepath.Join(outside, "ca.key")}}, wantField: "spec.keyStore.pkcs11.pinFile"},
	} {
		err := create(name, tc.ks)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.wantField) {
			t.Errorf("%s: error = %v, want 422 naming %s", name, err, tc.wantField)
		}
	}
	if err := create("file-allowed", rotationv1alpha1.KeyStore{Type: rotationv1alpha1.KeyStoreFile, File: &rotationv1alpha1.FileKeyStore{
		CertFile: filepath.Join(allowed, "ca.crt"), KeyFile: filepath.Join(allowed, "ca.key")}}); err != nil {
		t.Fatalf("a CA in the allowed directory was refused: %v", err)
	}
	// Without the flags, no File or PKCS#11 CA at all.
	bare := framework.StartStandalone(t, t.TempDir())
	_, err := bare.Client.RotationV1alpha1().CertificateAuthorities().Create(ctx, &rotationv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "f"},
		Spec: rotationv1alpha1.CertificateAuthoritySpec{KeyAlgorithm: rotationv1alpha1.ECDSAP256, KeyStore: rotationv1alpha1.KeyStore{Type: rotationv1alpha1.KeyStoreFile,
			File: &rotationv1alpha1.FileKeyStore{CertFile: filepath.Join(allowed, "ca.crt"), KeyFile: filepath.Join(allowed, "ca.key")}}}}, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "--file-keystore-dir") {
		t.Fatalf("File CA without --file-keystore-dir: %v", err)
	}
}

// Not parallel: framework.StartEtcd does not choose again when the ports
// it picked are taken before etcd listens (StartStandalone does), which
// tests starting beside it would make likelier.
func TestEtcdKeyStoreHoldsCiphertextOnlyAndRefusesAWrongKEK(t *testing.T) {
	etcdURL, etcd := framework.StartEtcd(t)
	dir := t.TempDir()
	srv := framework.StartStandalone(t, dir, "--etcd-servers="+etcdURL)
	client := srv.Client
	// Every built-in CA binds its key on its own; wait for all of them
	// before counting keys (waiting for two once raced the others).
	builtIns := policy.BuiltIns(false, false)
	for _, b := range builtIns {
		caOf(t, client, b.CA.Name)
	}
	ctx := context.Background()

	keys, err := etcd.Get(ctx, "/rekey.io-private/cakeys/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(keys.Kvs) < len(builtIns) {
		t.Fatalf("%d CA keys in etcd, want one per built-in CA (%d)", len(keys.Kvs), len(builtIns))
	}
	for _, kv := range keys.Kvs {
		var sealed struct {
			Ciphertext []byte `json:"ct"`
			Nonce      []byte `json:"nonce"`
		}
		if err := json.Unmarshal(kv.Value, &sealed); err != nil || len(sealed.Ciphertext) == 0 || len(sealed.Nonce) == 0 {
			t.Fatalf("%s is not a sealed key: %v", kv.Key, err)
		}
		if _, err := x509.ParsePKCS8PrivateKey(sealed.Ciphertext); err == nil {
			t.Fatalf("%s holds a plaintext key", kv.Key)
		}
	}
	// Nothing anywhere in etcd, and no API object, holds a PEM private key.
	all, err := etcd.Get(ctx, "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range all.Kvs {
		if bytes.Contains(kv.Value, []byte("PRIVATE KEY")) {
			t.Fatalf("etcd key %s holds a PEM private key", kv.Key)
		}
	}
	cas, err := client.RotationV1alpha1().CertificateAuthorities().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if data, err := json.Marshal(cas); err != nil || bytes.Contains(data, []byte("PRIVATE KEY")) {
		t.Fatal("a CertificateAuthority object holds a private key")
	}
	if strings.Contains(srv.Log(), "PRIVATE KEY") {
		t.Fatal("the server logged a private key")
	}

	srv.Stop(t)
	before, err := etcd.Get(ctx, "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	wrongKEK := filepath.Join(t.TempDir(), "wrong.key")
	if err := os.WriteFile(wrongKEK, bytes.Repeat([]byte{7}, 32), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := framework.RunToExit(t, 60*time.Second, "--standalone", "--data-dir", dir, "--etcd-servers="+etcdURL,
		fmt.Sprintf("--secure-port=%d", framework.FreePort(t)), "--ca-key-encryption-key-file="+wrongKEK)
	if err == nil {
		t.Fatalf("started with a wrong key-encryption key:\n%s", out)
	}
	if !strings.Contains(out, "key-encryption key") || !strings.Contains(out, "refusing to start") {
		t.Fatalf("unclear error for a wrong key-encryption key:\n%s", out)
	}
	after, err := etcd.Get(ctx, "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if before.Header.Revision != after.Header.Revision {
		t.Fatalf("a failed start with a wrong key wrote to etcd (revision %d -> %d)", before.Header.Revision, after.Header.Revision)
	}

	// With the right key everything still works.
	again := framework.StartStandalone(t, dir, "--etcd-servers="+etcdURL)
	createAndApprove(t, again.Client, requestFor(t, "after-restart", "rekey.io/kube-apiserver-client", fixtures.CSROptions{CommonName: "x"}, certv1alpha1.UsageClientAuth))
	verifyChain(t, waitForCertificate(t, again.Client, "after-restart"), caOf(t, again.Client, "rekey.io-kube-apiserver-client"), x509.ExtKeyUsageClientAuth)
}
