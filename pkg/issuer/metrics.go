package issuer

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	"rekey.io/rekey/pkg/authority"
)

var (
	createRateLimited = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "rekey", Subsystem: "signer", Name: "create_rate_limited_total",
		Help:           "Creates refused with 429 because their requester was over its create-time issuance rate (--requester-issuance-burst), by signer name.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"signer_name"})

	registerOnce sync.Once
)

// RegisterMetrics adds the signer metrics (package authority counts what
// is signed) to the /metrics registry.
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(createRateLimited)
		authority.RegisterMetrics()
	})
}
