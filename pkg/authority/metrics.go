package authority

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// The signer metrics keep their names (rekey_signer_*): what signs moved
// here from package issuer, the metrics did not change.
var (
	requestsTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "rekey", Subsystem: "signer", Name: "requests_total",
		Help:           "Approved requests handled by the signer, by signer name, result (issued, failed, error) and path (approval: signed in the approval write; create: approved and signed at create; controller: by the signer controller).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"signer_name", "result", "path"})
	requestedDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace: "rekey", Subsystem: "signer", Name: "requested_duration_seconds",
		Help:           "Certificate lifetime requested (or defaulted by policy), by signer name.",
		Buckets:        []float64{600, 3600, 6 * 3600, 86400, 7 * 86400, 30 * 86400, 90 * 86400, 365 * 86400},
		StabilityLevel: metrics.ALPHA,
	}, []string{"signer_name"})
	honoredDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace: "rekey", Subsystem: "signer", Name: "honored_duration_seconds",
		Help:           "Certificate lifetime granted, by signer name.",
		Buckets:        []float64{600, 3600, 6 * 3600, 86400, 7 * 86400, 30 * 86400, 90 * 86400, 365 * 86400},
		StabilityLevel: metrics.ALPHA,
	}, []string{"signer_name"})
	approvalToCertificate = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace: "rekey", Subsystem: "signer", Name: "approval_to_certificate_seconds",
		Help:           "Time from the Approved condition to the certificate being signed, by signer name (near zero when signed in the approval write or at create).",
		Buckets:        metrics.ExponentialBuckets(0.001, 2, 16),
		StabilityLevel: metrics.ALPHA,
	}, []string{"signer_name"})
	signingErrors = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "rekey", Subsystem: "signer", Name: "errors_total",
		Help:           "Signing errors by signer name and reason.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"signer_name", "reason"})

	registerOnce sync.Once
)

// RegisterMetrics adds the signing metrics to the /metrics registry.
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(requestsTotal, requestedDuration, honoredDuration, approvalToCertificate, signingErrors)
	})
}
