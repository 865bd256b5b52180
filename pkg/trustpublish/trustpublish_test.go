package trustpublish

import (
	"errors"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
)

func ca(name, bundle string) *rotationv1alpha1.CertificateAuthority {
	return &rotationv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: rotationv1alpha1.CertificateAuthorityStatus{TrustBundle: bundle}}
}

func only(name string) func(*rotationv1alpha1.CertificateAuthority) bool {
	return func(ca *rotationv1alpha1.CertificateAuthority) bool { return ca.Name == name }
}

// TestLaggingNamesWhatHasNotWrittenTheBundle: a publisher that concerns a
// CA lags until it reports the CA's current bundle written; one that does
// not concern it never holds it.
func TestLaggingNamesWhatHasNotWrittenTheBundle(t *testing.T) {
	tr := New()
	pub := tr.Register("publisher", only("team-ca"))
	tr.Register("serving", only("rekey.io-serving"))
	team := ca("team-ca", "OLD+NEW")

	if got := tr.Lagging(team); !slices.Equal(got, []string{"publisher: not written yet"}) {
		t.Fatalf("before any report: %q", got)
	}
	pub.Published("team-ca", "OLD")
	if got := tr.Lagging(team); !slices.Equal(got, []string{"publisher: writing the new bundle"}) {
		t.Fatalf("an older bundle reported: %q", got)
	}
	pub.Failed("team-ca", errors.New("configmaps is forbidden"))
	if got := tr.Lagging(team); len(got) != 1 || !strings.Contains(got[0], "configmaps is forbidden") {
		t.Fatalf("a failure reported: %q", got)
	}
	pub.Published("team-ca", "OLD+NEW")
	if got := tr.Lagging(team); len(got) != 0 {
		t.Fatalf("the bundle written, yet lagging: %q", got)
	}
	// A CA that no publisher concerns waits for none.
	if got := tr.Lagging(ca("other-ca", "X")); len(got) != 0 {
		t.Fatalf("a CA no publisher concerns lags: %q", got)
	}
	// A deleted CA's report is dropped: a CA made again under its name
	// waits for a new one.
	pub.Forget("team-ca")
	if got := tr.Lagging(team); !slices.Equal(got, []string{"publisher: not written yet"}) {
		t.Fatalf("after Forget: %q", got)
	}
}

// TestRegisteringAgainStartsAfresh: a new leadership term's publisher
// replaces the last one's reports, so a new leader waits for its own.
func TestRegisteringAgainStartsAfresh(t *testing.T) {
	tr := New()
	tr.Register("publisher", only("team-ca")).Published("team-ca", "B")
	tr.Register("publisher", only("team-ca"))
	if got := tr.Lagging(ca("team-ca", "B")); !slices.Equal(got, []string{"publisher: not written yet"}) {
		t.Fatalf("the last term's report counted: %q", got)
	}
}

// TestOnChangeOnlyWhenAReportChanges: the CA controller is told about a
// CA whose report changed, not about every repeated report.
func TestOnChangeOnlyWhenAReportChanges(t *testing.T) {
	tr := New()
	var told []string
	tr.OnChange(func(name string) { told = append(told, name) })
	pub := tr.Register("publisher", only("team-ca"))
	pub.Published("team-ca", "B")
	pub.Published("team-ca", "B")
	pub.Failed("team-ca", errors.New("x"))
	if !slices.Equal(told, []string{"team-ca", "team-ca"}) {
		t.Fatalf("told %q, want one call per change (two)", told)
	}
}
