package credential

import (
	"sync"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
)

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
	registerOnce sync.Once
)

// RegisterMetrics registers the controller's metrics (once).
func RegisterMetrics() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(rotations, failures, untilRotation)
	})
}

func setUntilRotation(rc *rotationv1alpha1.RotatingCredential, now time.Time) {
	if t := rc.Status.NextRotationTime; t != nil {
		untilRotation.WithLabelValues(rc.Namespace, rc.Name).Set(t.Sub(now).Seconds())
	}
}

// forget drops a deleted RotatingCredential's gauge.
func forget(key string) {
	if ns, name, err := cache.SplitMetaNamespaceKey(key); err == nil {
		untilRotation.DeleteLabelValues(ns, name)
	}
}
