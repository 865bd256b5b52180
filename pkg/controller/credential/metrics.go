package credential

import (
	"crypto/x509"
	"encoding/pem"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
)

// The per-credential gauges below (namespace, name) have one series per
// RotatingCredential at most, and degraded one per degraded credential
// only. That number is not bounded by rekey nor by a namespace's
// ResourceQuota (kube-apiserver's quota admission does not run for an
// aggregated API's resources): it is bounded by who may create
// RotatingCredentials (RBAC) and by storage. docs/operations.md says so.
var (
	rotations = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "rekey", Subsystem: "credential", Name: "mints_total",
		Help: "Credentials minted into RotatingCredentials' Secrets, by minter.", StabilityLevel: metrics.ALPHA,
	}, []string{"minter"})
	failures = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "rekey", Subsystem: "credential", Name: "failures_total",
		Help: "Failed rotation steps, by minter and reason.", StabilityLevel: metrics.ALPHA,
	}, []string{"minter", "reason"})
	untilRotation = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "rekey", Subsystem: "credential", Name: "seconds_until_rotation",
		Help: "Seconds until a RotatingCredential's next rotation, when it last waited.", StabilityLevel: metrics.ALPHA,
	}, []string{"namespace", "name"})
	// The time itself, unlike seconds_until_rotation (which is true only
	// at the moment it was set): an alert compares it with time().
	nextRotation = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "rekey", Subsystem: "credential", Name: "next_rotation_timestamp_seconds",
		Help: "When (Unix time) a RotatingCredential's current credential is due to be replaced (status.nextRotationTime).", StabilityLevel: metrics.ALPHA,
	}, []string{"namespace", "name"})
	degraded = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "rekey", Subsystem: "credential", Name: "degraded",
		Help: "1 while a RotatingCredential's Degraded condition is True (its last rotation step failed; the current credential stays); no series otherwise.", StabilityLevel: metrics.ALPHA,
	}, []string{"namespace", "name"})
	certificateNotAfter = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "rekey", Subsystem: "credential", Name: "certificate_not_after_timestamp_seconds",
		Help: "End of validity (Unix time) of the certificate in a ClientCertificate RotatingCredential's Secret (tls.crt of the current generation).", StabilityLevel: metrics.ALPHA,
	}, []string{"namespace", "name"})
	registerOnce sync.Once
)

// RegisterMetrics registers the controller's metrics (once).
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(rotations, failures, untilRotation, nextRotation, degraded, certificateNotAfter)
	})
}

func setUntilRotation(rc *rotationv1alpha1.RotatingCredential, now time.Time) {
	if t := rc.Status.NextRotationTime; t != nil {
		untilRotation.WithLabelValues(rc.Namespace, rc.Name).Set(t.Sub(now).Seconds())
	}
}

// observe records what a RotatingCredential's stored status says, on every
// informer event: whichever write set the condition, the gauge follows
// the object.
func observe(rc *rotationv1alpha1.RotatingCredential) {
	// A series only while degraded: healthy credentials, however many,
	// cost none (alerts test == 1, absent is healthy).
	if meta.IsStatusConditionTrue(rc.Status.Conditions, ConditionDegraded) {
		degraded.WithLabelValues(rc.Namespace, rc.Name).Set(1)
	} else {
		degraded.DeleteLabelValues(rc.Namespace, rc.Name)
	}
	if t := rc.Status.NextRotationTime; t != nil {
		nextRotation.WithLabelValues(rc.Namespace, rc.Name).Set(float64(t.Unix()))
	} else {
		nextRotation.DeleteLabelValues(rc.Namespace, rc.Name)
	}
}

// observeSecret records the end of validity of the certificate a
// ClientCertificate credential's Secret holds, read at each reconcile.
// Only a Secret rekey created counts: another one's certificate is not
// the credential. A Secret without a certificate that parses has no
// series, rather than a stale one.
func observeSecret(rc *rotationv1alpha1.RotatingCredential, secret *corev1.Secret) {
	if rc.Spec.Minter.Type != rotationv1alpha1.MinterClientCertificate {
		return
	}
	if secret == nil || !CreatedByRekey(rc, secret) {
		certificateNotAfter.DeleteLabelValues(rc.Namespace, rc.Name)
		return
	}
	block, _ := pem.Decode(secret.Data["tls.crt"])
	if block == nil {
		certificateNotAfter.DeleteLabelValues(rc.Namespace, rc.Name)
		return
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		certificateNotAfter.DeleteLabelValues(rc.Namespace, rc.Name)
		return
	}
	certificateNotAfter.WithLabelValues(rc.Namespace, rc.Name).Set(float64(cert.NotAfter.Unix()))
}

// forget drops a deleted RotatingCredential's gauges.
func forget(key string) {
	if ns, name, err := cache.SplitMetaNamespaceKey(key); err == nil {
		untilRotation.DeleteLabelValues(ns, name)
		nextRotation.DeleteLabelValues(ns, name)
		degraded.DeleteLabelValues(ns, name)
		certificateNotAfter.DeleteLabelValues(ns, name)
	}
}

// forgetAll drops the gauges of every RotatingCredential this controller
// knows when it stops (the end of a leadership term): the next leader
// reports them, and a former leader's frozen values would otherwise keep an
// alert firing, or hide one.
func (c *Controller) forgetAll() {
	all, err := c.creds.List(labels.Everything())
	if err != nil {
		return
	}
	for _, rc := range all {
		forget(rc.Namespace + "/" + rc.Name)
	}
}
