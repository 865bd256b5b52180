package certificateauthority

import (
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
)

var (
	rotationPhase = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "rekey", Subsystem: "ca", Name: "rotation_phase",
		Help:           "1 for the rotation phase each CertificateAuthority is in (none, Preparing, Prepared, Completing, Completed), 0 for the others.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"ca", "phase"})
	phaseSince = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "rekey", Subsystem: "ca", Name: "rotation_phase_since_timestamp_seconds",
		Help:           "When each CertificateAuthority entered its rotation phase (time in phase = time() minus this).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"ca"})
	pendingRenewal = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "rekey", Subsystem: "ca", Name: "pending_renewal_certificates",
		Help:           "Valid certificates signed by the previous CA and not renewed, during a rotation.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"ca"})
	notAfter = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "rekey", Subsystem: "ca", Name: "not_after_timestamp_seconds",
		Help:           "End of validity of each CertificateAuthority's current certificate.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"ca"})

	// Every certificate a CA has, not only the one that signs: during a
	// rotation the previous one still verifies what it signed (the
	// certificates not renewed stop verifying when it expires), and a
	// next one that expires before the current one is a rotation to
	// abandon. Three series a CA at most.
	keyNotAfter = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "rekey", Subsystem: "ca", Name: "certificate_not_after_timestamp_seconds",
		Help:           "End of validity (Unix time) of each CertificateAuthority's certificates, by key: current (signs), previous (rotated out, still trusted until the rotation completes), next (made by Start, signing from Prepared).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"ca", "key"})

	trustWaiting = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace: "rekey", Subsystem: "ca", Name: "trust_waiting_consumers",
		Help:           "Trust consumers that do not yet report holding a Preparing CertificateAuthority's new CA (0 outside Preparing).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"ca"})

	registerOnce sync.Once
)

var phases = []rotationv1alpha1.RotationPhase{rotationv1alpha1.PhaseNone, rotationv1alpha1.PhasePreparing,
	rotationv1alpha1.PhasePrepared, rotationv1alpha1.PhaseCompleting, rotationv1alpha1.PhaseCompleted}

// RegisterMetrics adds the CA metrics to the /metrics registry.
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(rotationPhase, phaseSince, pendingRenewal, notAfter, keyNotAfter, trustWaiting)
	})
}

// observe records what a CA's status says.
func observe(ca *rotationv1alpha1.CertificateAuthority) {
	s := ca.Status
	for _, p := range phases {
		v := 0.0
		if p == s.Phase {
			v = 1
		}
		name := string(p)
		if name == "" {
			name = "none"
		}
		rotationPhase.WithLabelValues(ca.Name, name).Set(v)
	}
	since := ca.CreationTimestamp.Time
	for _, t := range []*metav1.Time{s.LastInitiationTime, s.LastInitiationFinishedTime, s.LastCompletionTriggeredTime, s.LastCompletionTime} {
		if t != nil && t.After(since) {
			since = t.Time
		}
	}
	phaseSince.WithLabelValues(ca.Name).Set(float64(since.Unix()))
	pendingRenewal.WithLabelValues(ca.Name).Set(float64(s.PendingRenewal))
	waiting := 0.0
	if s.Phase == rotationv1alpha1.PhasePreparing && s.Trust != nil {
		waiting = float64(s.Trust.Waiting)
	}
	trustWaiting.WithLabelValues(ca.Name).Set(waiting)
	if s.Current != nil {
		notAfter.WithLabelValues(ca.Name).Set(float64(s.Current.NotAfter.Unix()))
	}
	for _, k := range []struct {
		key  string
		cert *rotationv1alpha1.CACertificate
	}{{keyCurrent, s.Current}, {keyPrevious, s.Previous}, {keyNext, s.Next}} {
		if k.cert == nil {
			// A previous key destroyed by Complete, a next key made
			// current by Prepared: its series goes.
			keyNotAfter.DeleteLabelValues(ca.Name, k.key)
			continue
		}
		keyNotAfter.WithLabelValues(ca.Name, k.key).Set(float64(k.cert.NotAfter.Unix()))
	}
}

// The key label of rekey_ca_certificate_not_after_timestamp_seconds.
const (
	keyCurrent  = "current"
	keyPrevious = "previous"
	keyNext     = "next"
)

// forget drops a deleted CA's series.
func forget(name string) {
	for _, p := range phases {
		n := string(p)
		if n == "" {
			n = "none"
		}
		rotationPhase.DeleteLabelValues(name, n)
	}
	phaseSince.DeleteLabelValues(name)
	pendingRenewal.DeleteLabelValues(name)
	notAfter.DeleteLabelValues(name)
	for _, k := range []string{keyCurrent, keyPrevious, keyNext} {
		keyNotAfter.DeleteLabelValues(name, k)
	}
	trustWaiting.DeleteLabelValues(name)
}

// forgetAll drops the series of every CA this controller knows when it
// stops (the end of a leadership term): the next leader reports them, and
// a former leader's frozen values would otherwise keep an alert firing (a
// rotation "stuck" in the phase it last saw), or hide one.
func (c *Controller) forgetAll() {
	all, err := c.lister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, ca := range all {
		forget(ca.Name)
	}
}
