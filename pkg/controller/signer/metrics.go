package signer

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"rekey.io/rekey/pkg/issuer"
)

var (
	// One series a Signer, set whenever its Ready condition is decided
	// (written or found unchanged), so that an alert needs no host
	// cluster to read conditions from.
	signerReady = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "rekey", Subsystem: "signer", Name: "ready",
		Help:           "1 when a Signer's Ready condition is True (its CertificateAuthority can sign), 0 when False, by signer name.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"signer_name"})

	registerOnce sync.Once
)

// RegisterMetrics adds the signer controller's metrics, and the signing
// metrics it counts through (package issuer), to the /metrics registry.
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(signerReady)
		issuer.RegisterMetrics()
	})
}
