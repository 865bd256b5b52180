package credential

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics/legacyregistry"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	rotationlisters "rekey.io/rekey/pkg/generated/listers/rotation/v1alpha1"
)

// metricsRC is a RotatingCredential of its own namespace: the other tests
// of the package run controllers on team/db, whose goroutines may still
// report (or drop) that one's series.
func metricsRC() *rotationv1alpha1.RotatingCredential {
	rc := newRC()
	rc.Namespace, rc.Name = "metrics-test", "rc"
	return rc
}

// series is the value of gauge name for metricsRC as /metrics serves it,
// and whether it is there at all.
func series(t *testing.T, name string) (float64, bool) {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["namespace"] == "metrics-test" && labels["name"] == "rc" {
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

// The Degraded gauge and the next rotation follow the stored object, and
// go with it.
func TestObserveFollowsDegradedAndNextRotation(t *testing.T) {
	RegisterMetrics()
	rc := metricsRC()
	next := metav1.NewTime(t0.Add(time.Hour))
	rc.Status.NextRotationTime = &next
	meta.SetStatusCondition(&rc.Status.Conditions, metav1.Condition{Type: ConditionDegraded, Status: metav1.ConditionTrue, Reason: "WebhookFailed"})
	observe(rc)
	if v, ok := series(t, "rekey_credential_degraded"); !ok || v != 1 {
		t.Fatalf("Degraded=True: gauge %v (present %v)", v, ok)
	}
	if v, ok := series(t, "rekey_credential_next_rotation_timestamp_seconds"); !ok || v != float64(next.Unix()) {
		t.Fatalf("next rotation %v (present %v), want %d", v, ok, next.Unix())
	}
	meta.SetStatusCondition(&rc.Status.Conditions, metav1.Condition{Type: ConditionDegraded, Status: metav1.ConditionFalse, Reason: "AsExpected"})
	observe(rc)
	// Only a degraded credential has a series: one per RotatingCredential
	// would make the healthy ones, unbounded in number, cost a series each.
	if v, ok := series(t, "rekey_credential_degraded"); ok {
		t.Fatalf("Degraded=False: gauge %v, want no series", v)
	}
	forget("metrics-test/rc")
	for _, name := range []string{"rekey_credential_degraded", "rekey_credential_next_rotation_timestamp_seconds"} {
		if _, ok := series(t, name); ok {
			t.Errorf("%s stayed after the RotatingCredential was deleted", name)
		}
	}
}

// fixedCertMinter mints a self-signed certificate ending at notAfter, as
// the ClientCertificate minter's Secret holds one.
type fixedCertMinter struct {
	t        *testing.T
	notAfter time.Time
}

func (m fixedCertMinter) Mint(context.Context, *rotationv1alpha1.RotatingCredential, int64) (map[string][]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		m.t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "billing-app"}, NotBefore: t0, NotAfter: m.notAfter}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		m.t.Fatal(err)
	}
	return map[string][]byte{"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

func (fixedCertMinter) Revoke(context.Context, *rotationv1alpha1.RotatingCredential, int64) error {
	return nil
}

// A ClientCertificate credential's certificate expiry is a metric while
// its Secret is the one rekey created; another Secret of that name, or
// none, has no series rather than a certificate rekey did not mint.
func TestObserveSecretReportsTheCertificatesNotAfter(t *testing.T) {
	RegisterMetrics()
	rc := metricsRC()
	rc.Spec.Minter = rotationv1alpha1.Minter{Type: rotationv1alpha1.MinterClientCertificate,
		ClientCertificate: &rotationv1alpha1.ClientCertificateMinter{SignerName: "example.com/apps", CommonName: "billing-app"}}
	rc.Status.SecretUID = "secret-1"
	t.Cleanup(func() { forget(rc.Namespace + "/" + rc.Name) })
	notAfter := t0.Add(70 * time.Minute)
	data, _ := fixedCertMinter{t: t, notAfter: notAfter}.Mint(context.Background(), rc, 1)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: rc.Namespace, UID: "secret-1"}, Data: data}
	observeSecret(rc, secret)
	if v, ok := series(t, "rekey_credential_certificate_not_after_timestamp_seconds"); !ok || v != float64(notAfter.Unix()) {
		t.Fatalf("certificate notAfter %v (present %v), want %d", v, ok, notAfter.Unix())
	}
	other := secret.DeepCopy()
	other.UID = "secret-2"
	observeSecret(rc, other)
	if _, ok := series(t, "rekey_credential_certificate_not_after_timestamp_seconds"); ok {
		t.Fatal("a Secret rekey did not create is reported")
	}
	observeSecret(rc, secret)
	observeSecret(rc, nil)
	if _, ok := series(t, "rekey_credential_certificate_not_after_timestamp_seconds"); ok {
		t.Fatal("the series stayed without the Secret")
	}
}

// A controller that stops (its leadership term ended) drops the series of
// the RotatingCredentials it reported: the next leader reports them.
func TestForgetAllDropsTheSeriesOfEveryKnownCredential(t *testing.T) {
	RegisterMetrics()
	rc := metricsRC()
	meta.SetStatusCondition(&rc.Status.Conditions, metav1.Condition{Type: ConditionDegraded, Status: metav1.ConditionTrue, Reason: "WebhookFailed"})
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	if err := indexer.Add(rc); err != nil {
		t.Fatal(err)
	}
	c := &Controller{creds: rotationlisters.NewRotatingCredentialLister(indexer)}
	observe(rc)
	if _, ok := series(t, "rekey_credential_degraded"); !ok {
		t.Fatal("no series before the controller stops")
	}
	c.forgetAll()
	if _, ok := series(t, "rekey_credential_degraded"); ok {
		t.Fatal("the series stayed after the controller stopped")
	}
}
