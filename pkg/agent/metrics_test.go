package agent

import (
	"context"
	"testing"

	"k8s.io/component-base/metrics/testutil"
)

// validity is what the agent's validity gauges say for kind.
func validity(t *testing.T, kind string) (notBefore, notAfter float64) {
	t.Helper()
	nb, err := testutil.GetGaugeMetricValue(certificateNotBefore.WithLabelValues(kind))
	if err != nil {
		t.Fatal(err)
	}
	na, err := testutil.GetGaugeMetricValue(certificateNotAfter.WithLabelValues(kind))
	if err != nil {
		t.Fatal(err)
	}
	return nb, na
}

// The validity gauges follow the pair in use: set at the bootstrap, kept
// through a failed renewal (the pair stays in use), 0 when there is none.
func TestValidityGaugesFollowThePairInUse(t *testing.T) {
	RegisterMetrics() // unregistered metrics record nothing
	f := &fakeSigner{t: t, ca: newCA(t)}
	m, _ := newManager(t, f)
	m.Store.Prefix = "validity-test"
	pair, err := m.Once(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	wantNB, wantNA := float64(pair.Leaf.NotBefore.Unix()), float64(pair.Leaf.NotAfter.Unix())
	if nb, na := validity(t, "validity-test"); nb != wantNB || na != wantNA {
		t.Fatalf("after the bootstrap: notBefore %v notAfter %v, want %v %v", nb, na, wantNB, wantNA)
	}

	// A template the pair does not match makes it due; the signer refuses
	// the renewal, and the pair stays in use.
	f.refuse = true
	m.Template = ClientTemplate(DefaultSigner, "other")
	if _, err := m.Once(context.Background()); err == nil {
		t.Fatal("refused renewal reported no error")
	}
	if nb, na := validity(t, "validity-test"); nb != wantNB || na != wantNA {
		t.Fatalf("after a refused renewal: notBefore %v notAfter %v, want the pair in use's %v %v", nb, na, wantNB, wantNA)
	}

	// No pair at all: an empty store and a refused bootstrap.
	m.Store.Dir = t.TempDir()
	if _, err := m.Once(context.Background()); err == nil {
		t.Fatal("refused bootstrap reported no error")
	}
	if nb, na := validity(t, "validity-test"); nb != 0 || na != 0 {
		t.Fatalf("without a certificate: notBefore %v notAfter %v, want 0 0", nb, na)
	}
}

func TestKind(t *testing.T) {
	for prefix, want := range map[string]string{PrefixClient: "client", PrefixServer: "serving", "other": "other"} {
		if got := Kind(prefix); got != want {
			t.Errorf("Kind(%q) = %q, want %q", prefix, got, want)
		}
	}
}
