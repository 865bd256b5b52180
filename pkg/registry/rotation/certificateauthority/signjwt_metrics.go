package certificateauthority

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// The signjwt metrics. key_id is empty when the request was refused or
// failed before a key was chosen; only CAs that exist are counted, so the
// label values are bounded by the CAs and their keys.
var (
	signaturesTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "rekey", Subsystem: "service_account_token", Name: "signatures_total",
		Help:           "JWTs posted to certificateauthorities/NAME/signjwt, by CA, kid of the key that signed (empty when none did) and result (signed; refused: the CA or the claims broke a rule; unavailable: the CA has no usable key; error: the key failed to sign).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"certificate_authority", "key_id", "result"})
	signDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace: "rekey", Subsystem: "service_account_token", Name: "sign_duration_seconds",
		Help:           "Time the CA key took to sign one JWT (an HSM's round trip included), by CA.",
		Buckets:        metrics.ExponentialBuckets(0.0001, 2, 16),
		StabilityLevel: metrics.ALPHA,
	}, []string{"certificate_authority"})

	registerSignJWTOnce sync.Once
)

// registerSignJWTMetrics adds the signjwt metrics to the /metrics registry.
func registerSignJWTMetrics() {
	registerSignJWTOnce.Do(func() {
		legacyregistry.MustRegister(signaturesTotal, signDuration)
	})
}
