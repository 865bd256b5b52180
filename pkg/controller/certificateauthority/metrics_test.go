package certificateauthority

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics/legacyregistry"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	rotationlisters "rekey.io/rekey/pkg/generated/listers/rotation/v1alpha1"
)

// keySeries is the value of each key's not-after series of one CA, as
// /metrics would serve them (a deleted series is absent).
func keySeries(t *testing.T, ca string) map[string]float64 {
	t.Helper()
	return gaugeValues(t, "rekey_ca_certificate_not_after_timestamp_seconds", ca, "key")
}

// gaugeValues is each series of gauge name whose label ca is ca, by the
// value of its label by.
func gaugeValues(t *testing.T, name, ca, by string) map[string]float64 {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["ca"] == ca {
				got[labels[by]] = m.GetGauge().GetValue()
			}
		}
	}
	return got
}

// Each certificate of a CA has its end of validity as a series while the
// CA has it: previous from Prepared to Completed, next during Preparing.
func TestObserveReportsEveryKeysNotAfter(t *testing.T) {
	RegisterMetrics()
	t.Cleanup(func() { forget("metrics-ca") })
	oldEnd := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	newEnd := time.Date(2036, 1, 1, 0, 0, 0, 0, time.UTC)
	ca := &rotationv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "metrics-ca"}}
	ca.Status.Phase = rotationv1alpha1.PhasePreparing
	ca.Status.Current = &rotationv1alpha1.CACertificate{NotAfter: metav1.NewTime(oldEnd)}
	ca.Status.Next = &rotationv1alpha1.CACertificate{NotAfter: metav1.NewTime(newEnd)}
	observe(ca)
	if got := keySeries(t, "metrics-ca"); len(got) != 2 || got["current"] != float64(oldEnd.Unix()) || got["next"] != float64(newEnd.Unix()) {
		t.Fatalf("Preparing: %v", got)
	}

	ca.Status.Phase = rotationv1alpha1.PhasePrepared
	ca.Status.Current, ca.Status.Previous, ca.Status.Next = ca.Status.Next, ca.Status.Current, nil
	observe(ca)
	if got := keySeries(t, "metrics-ca"); len(got) != 2 || got["current"] != float64(newEnd.Unix()) || got["previous"] != float64(oldEnd.Unix()) {
		t.Fatalf("Prepared: %v", got)
	}

	ca.Status.Phase, ca.Status.Previous = rotationv1alpha1.PhaseCompleted, nil
	observe(ca)
	if got := keySeries(t, "metrics-ca"); len(got) != 1 || got["current"] != float64(newEnd.Unix()) {
		t.Fatalf("Completed: %v", got)
	}
}

// A replica whose controllers stop serves no CA series: a former leader's
// frozen phase would otherwise look like a rotation stuck in it.
func TestForgetAllDropsEveryKnownCA(t *testing.T) {
	RegisterMetrics()
	ca := &rotationv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "reset-ca"}}
	ca.Status.Phase = rotationv1alpha1.PhasePreparing
	ca.Status.Current = &rotationv1alpha1.CACertificate{NotAfter: metav1.NewTime(time.Now().Add(time.Hour))}
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := indexer.Add(ca); err != nil {
		t.Fatal(err)
	}
	c := &Controller{lister: rotationlisters.NewCertificateAuthorityLister(indexer)}
	observe(ca)
	if got := keySeries(t, "reset-ca"); len(got) != 1 {
		t.Fatalf("before the controller stops: %v", got)
	}
	c.forgetAll()
	if got := keySeries(t, "reset-ca"); len(got) != 0 {
		t.Fatalf("after the controller stopped: %v", got)
	}
	if phases := gaugeValues(t, "rekey_ca_rotation_phase", "reset-ca", "phase"); len(phases) != 0 {
		t.Fatalf("rotation phase after the controller stopped: %v", phases)
	}
}
