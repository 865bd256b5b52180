package crl

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	issuedTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "rekey", Subsystem: "crl", Name: "issued_total",
		Help:           "CRLs issued by this replica, by CA name and result (issued, error).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"ca_name", "result"})
	issueDuration = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace: "rekey", Subsystem: "crl", Name: "issue_duration_seconds",
		Help:           "Time to make and sign one CRL.",
		Buckets:        metrics.ExponentialBuckets(0.0005, 2, 16),
		StabilityLevel: metrics.ALPHA,
	})
	entriesGauge = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "rekey", Subsystem: "crl", Name: "entries",
		Help:           "Certificates listed in the last CRL of each CA key.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"ca_name", "key_id"})
	sizeGauge = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "rekey", Subsystem: "crl", Name: "size_bytes",
		Help:           "Size of the last CRL of each CA key (DER).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"ca_name", "key_id"})
	// The dates of the last CRL of each key: an alert compares them with
	// the time (RekeyCRLNotReissued in artifacts/monitoring/rekey-alerts.yaml). A CRL is
	// re-issued at half its validity, so one whose nextUpdate comes
	// closer than that was not: a key store that cannot sign, or a worker
	// that is stuck, before relying parties hold an expired CRL.
	thisUpdateGauge = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "rekey", Subsystem: "crl", Name: "this_update_timestamp_seconds",
		Help:           "thisUpdate of the last CRL of each CA key (Unix time).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"ca_name", "key_id"})
	nextUpdateGauge = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "rekey", Subsystem: "crl", Name: "next_update_timestamp_seconds",
		Help:           "nextUpdate of the last CRL of each CA key (Unix time).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"ca_name", "key_id"})

	registerOnce sync.Once
)

// RegisterMetrics adds the CRL metrics to the /metrics registry.
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(issuedTotal, issueDuration, entriesGauge, sizeGauge, thisUpdateGauge, nextUpdateGauge)
	})
}
