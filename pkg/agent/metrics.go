package agent

import (
	"crypto/tls"
	"errors"
	"sync"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	expirationSeconds = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "rekey", Subsystem: "agent", Name: "certificate_expiration_seconds",
		Help:           "Seconds until the current certificate expires, by file prefix (rekey-client, rekey-server).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"prefix"})
	renewals = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "rekey", Subsystem: "agent", Name: "renewals_total",
		Help:           "Certificates obtained (bootstrap or renewal), by file prefix.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"prefix"})
	renewalErrors = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "rekey", Subsystem: "agent", Name: "renewal_errors_total",
		Help:           "Failed attempts to obtain a certificate, by file prefix and reason (denied, failed, timeout, api, store; revoked: refused because the certificate it was asked with is revoked; issuer_check: the issuing CA could not be read).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"prefix", "reason"})

	earlyRenewalTime = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "rekey", Subsystem: "agent", Name: "early_renewal_timestamp_seconds",
		Help:           "When (Unix seconds) the current certificate is renewed because its CA rotates: a point inside the rotation's renewal window; 0 when it is not, by file prefix.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"prefix"})

	// The validity of the pair in use, as timestamps: unlike
	// certificate_expiration_seconds (true when it was set, at the last
	// look, which may be weeks ago), an alert can compare them with time().
	// One series per certificate kind: two per agent at most.
	certificateNotAfter = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "rekey", Subsystem: "agent", Name: "certificate_not_after_timestamp_seconds",
		Help:           "End of validity (Unix time) of the certificate in use, by kind (client, serving); 0 while the agent has no valid certificate.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind"})
	certificateNotBefore = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "rekey", Subsystem: "agent", Name: "certificate_not_before_timestamp_seconds",
		Help:           "Start of validity (Unix time) of the certificate in use, by kind (client, serving); 0 while the agent has no valid certificate.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind"})

	revokedCertificates = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace: "rekey", Subsystem: "agent", Name: "revoked_certificates_total",
		Help:           "Current certificates the server said were revoked, discarded and bootstrapped anew with a new key, by file prefix.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"prefix"})

	registerOnce sync.Once
)

// RegisterMetrics adds the agent's metrics to the /metrics registry.
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(expirationSeconds, renewals, renewalErrors, earlyRenewalTime, certificateNotAfter, certificateNotBefore, revokedCertificates)
	})
}

// observe records an attempt's outcome and the current certificate's
// remaining lifetime.
func (m *Manager) observe(err error, notAfter time.Time) {
	prefix := m.Store.Prefix
	if err == nil {
		if !notAfter.IsZero() {
			expirationSeconds.WithLabelValues(prefix).Set(time.Until(notAfter).Seconds())
		}
		return
	}
	reason := "api"
	var refusal *Refusal
	var timeout *TimeoutError
	var storeErr *StoreError
	switch {
	case AsRevoked(err) != nil:
		reason = "revoked"
	case errors.As(err, &refusal) && refusal.Condition == "Denied":
		reason = "denied"
	case errors.As(err, &refusal):
		reason = "failed"
	case errors.As(err, &timeout):
		reason = "timeout"
	case errors.As(err, &storeErr):
		reason = "store"
	}
	renewalErrors.WithLabelValues(prefix, reason).Inc()
}

// Kind is the kind label of a store's certificate: client or serving for
// the agent's two stores, else the file prefix.
func Kind(prefix string) string {
	switch prefix {
	case PrefixClient:
		return "client"
	case PrefixServer:
		return "serving"
	}
	return prefix
}

// observeValidity records the validity of the pair in use after an
// attempt: the pair Once returns, or, when the attempt failed, the one
// still in the store (a failed renewal keeps it in use). Zero when there
// is none that is valid now: an alert treats that as expired.
func (m *Manager) observeValidity(pair *tls.Certificate) {
	if pair == nil {
		if current, err := m.Store.Current(); err == nil {
			pair = current
		}
	}
	notBefore, notAfter := 0.0, 0.0
	if pair != nil && pair.Leaf != nil {
		notBefore, notAfter = float64(pair.Leaf.NotBefore.Unix()), float64(pair.Leaf.NotAfter.Unix())
	}
	kind := Kind(m.Store.Prefix)
	certificateNotBefore.WithLabelValues(kind).Set(notBefore)
	certificateNotAfter.WithLabelValues(kind).Set(notAfter)
}

// TimeoutError is a request not decided within the wait.
type TimeoutError struct {
	Request string
	Wait    time.Duration
}

func (e *TimeoutError) Error() string {
	return "certificate request " + e.Request + " not decided within " + e.Wait.String()
}

// StoreError is a failure to read or write the certificate directory.
type StoreError struct{ Err error }

func (e *StoreError) Error() string { return e.Err.Error() }
func (e *StoreError) Unwrap() error { return e.Err }
