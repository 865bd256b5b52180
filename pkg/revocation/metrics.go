package revocation

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Decisions, as the webhook's decisions_total labels them.
const (
	decisionDeny      = "deny"
	decisionNoOpinion = "noopinion"
	// decisionError: a request the webhook could not decide (malformed, or
	// before the set has synced: then kube-apiserver's failurePolicy
	// decides).
	decisionError = "error"
)

var (
	decisions = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "rekey", Subsystem: "revocation_webhook", Name: "decisions_total",
		Help:           "SubjectAccessReviews answered by the revocation webhook, by decision: deny (a revoked certificate), noopinion, error (malformed, or the revocations not loaded yet: answered with an HTTP error, so kube-apiserver applied its failurePolicy).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"decision"})
	duration = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace: "rekey", Subsystem: "revocation_webhook", Name: "duration_seconds",
		Help:           "Time the revocation webhook took to decide, from the request's arrival to the answer written (reading and decoding the body included).",
		Buckets:        metrics.ExponentialBuckets(0.00001, 2, 16), // 10µs .. ~0.33s
		StabilityLevel: metrics.ALPHA,
	})
	revokedCertificates = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "rekey", Name: "revoked_certificates",
		Help:           "Certificates in this replica's revoked set (unexpired Revocations).",
		StabilityLevel: metrics.ALPHA,
	})
	authnRefused = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: "rekey", Subsystem: "revocation", Name: "authentication_refused_total",
		Help:           "Requests whose authenticated user carried a revoked certificate's credential-id, refused by rekey's own authentication (401).",
		StabilityLevel: metrics.ALPHA,
	})

	registerOnce sync.Once
	// The counters of each decision, resolved once after registration (a
	// component-base vector hands out no-op children before it): the
	// webhook's hot path then does no label lookup.
	denyCount, noOpinionCount, errorCount metrics.CounterMetric
)

// RegisterMetrics adds the revocation metrics to the /metrics registry.
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(decisions, duration, revokedCertificates, authnRefused)
		denyCount = decisions.WithLabelValues(decisionDeny)
		noOpinionCount = decisions.WithLabelValues(decisionNoOpinion)
		errorCount = decisions.WithLabelValues(decisionError)
	})
}
