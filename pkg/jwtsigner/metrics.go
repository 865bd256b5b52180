package jwtsigner

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// Results of rekey_jwt_signer_signatures_total, as rekey-apiserver's
// rekey_service_account_token_signatures_total names them.
const (
	resultSigned      = "signed"
	resultRefused     = "refused"
	resultUnavailable = "unavailable"
	resultError       = "error"
)

// Operations of rekey_jwt_signer_errors_total.
const (
	opSign       = "sign"
	opReread     = "reread"
	opCA         = "certificate_authority"
	opCacheRead  = "cache_read"
	opCacheWrite = "cache_write"
	opReport     = "report"
)

// The jwt-signer's metrics. key_id takes only kids rekey-apiserver
// answered (empty when none did), so its values are bounded by the CA's keys.
var (
	signaturesTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "rekey", Subsystem: "jwt_signer", Name: "signatures_total",
		Help:           "Sign calls of kube-apiserver, by kid of the key that signed (empty when none did) and result (signed; refused: rekey-apiserver refused the claims or the CA; unavailable: rekey-apiserver or the key could not be reached, or the key that signed is not served yet; error: anything else, a signature that does not verify over the claims sent included).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"key_id", "result"})
	signDuration = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace: "rekey", Subsystem: "jwt_signer", Name: "sign_duration_seconds",
		Help:           "Time one Sign call took, the round trip to rekey-apiserver's signjwt included.",
		Buckets:        metrics.ExponentialBuckets(0.001, 2, 15),
		StabilityLevel: metrics.ALPHA,
	})
	fetchesTotal = metrics.NewCounter(&metrics.CounterOpts{
		Namespace: "rekey", Subsystem: "jwt_signer", Name: "fetches_total",
		Help:           "FetchKeys calls answered with keys.",
		StabilityLevel: metrics.ALPHA,
	})
	lastFetch = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace: "rekey", Subsystem: "jwt_signer", Name: "last_fetch_timestamp_seconds",
		Help:           "When (Unix time) kube-apiserver last fetched the keys; 0 until it has. time() minus it is how long ago.",
		StabilityLevel: metrics.ALPHA,
	})
	errorsTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "rekey", Subsystem: "jwt_signer", Name: "errors_total",
		Help:           "Failures, by operation (sign: a Sign call failed; reread: reading the CertificateAuthority after an unknown kid failed; certificate_authority: the CertificateAuthority read has no keys that can be served; cache_read, cache_write: the cache file; report: registering or reporting the TrustConsumer).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"operation"})
	keysServed = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "rekey", Subsystem: "jwt_signer", Name: "keys",
		Help:           "Keys served to kube-apiserver, by state (current, next, previous, legacy).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"state"})

	registerOnce sync.Once
)

// RegisterMetrics adds the jwt-signer's metrics to the /metrics registry.
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(signaturesTotal, signDuration, fetchesTotal, lastFetch, errorsTotal, keysServed)
	})
}
