package trustconsumer

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	clocktesting "k8s.io/utils/clock/testing"

	"rekey.io/rekey/pkg/apis/rotation"
)

func fp(i int) string { return fmt.Sprintf("SHA256:%064x", i) }

func consumer() *rotation.TrustConsumer {
	return &rotation.TrustConsumer{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-apiserver", ResourceVersion: "1"},
		Spec:       rotation.TrustConsumerSpec{CertificateAuthorities: []string{"a", "b"}, Reporter: "syncer"},
	}
}

func asUser(name string) context.Context {
	return genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: name})
}

// The reporter is whoever registers, whatever the client sent; a new
// consumer holds nothing.
func TestCreateSetsReporterAndClearsStatus(t *testing.T) {
	s := NewStrategy(runtime.NewScheme())
	tc := consumer()
	tc.Spec.Reporter = "someone-else"
	tc.Status.Holds = []rotation.TrustHeld{{CertificateAuthority: "a", Fingerprints: []string{fp(1)}}}
	s.PrepareForCreate(asUser("syncer"), tc)
	if tc.Spec.Reporter != "syncer" || len(tc.Status.Holds) != 0 {
		t.Fatalf("reporter %q, status %+v", tc.Spec.Reporter, tc.Status)
	}
	if errs := s.Validate(asUser("syncer"), tc); len(errs) != 0 {
		t.Fatal(errs)
	}
	// No user (never so through the API): no reporter, which validation refuses.
	anonymous := consumer()
	s.PrepareForCreate(context.Background(), anonymous)
	if errs := s.Validate(context.Background(), anonymous); len(errs) == 0 {
		t.Fatal("a consumer without a reporter was accepted")
	}
}

// A spec update keeps reporter and status, and drops the report on a CA
// the consumer no longer names.
func TestUpdateKeepsReporterAndStatus(t *testing.T) {
	s := NewStrategy(runtime.NewScheme())
	old := consumer()
	old.Generation = 1
	old.Status.Holds = []rotation.TrustHeld{{CertificateAuthority: "a", Fingerprints: []string{fp(1)}}, {CertificateAuthority: "b"}}
	updated := old.DeepCopy()
	updated.Spec.Reporter = "mallory"
	updated.Status = rotation.TrustConsumerStatus{}
	s.PrepareForUpdate(asUser("syncer"), updated, old)
	if updated.Spec.Reporter != "syncer" || len(updated.Status.Holds) != 2 || updated.Generation != 1 {
		t.Fatalf("reporter %q, status %+v, generation %d", updated.Spec.Reporter, updated.Status, updated.Generation)
	}
	updated.Spec.CertificateAuthorities = []string{"a", "c"}
	s.PrepareForUpdate(asUser("syncer"), updated, old)
	if len(updated.Status.Holds) != 1 || updated.Status.Holds[0].CertificateAuthority != "a" || updated.Generation != 2 {
		t.Fatalf("status %+v, generation %d", updated.Status, updated.Generation)
	}
	if len(old.Status.Holds) != 2 {
		t.Fatal("the stored object was changed")
	}
	if errs := s.ValidateUpdate(asUser("syncer"), updated, old); len(errs) != 0 {
		t.Fatal(errs)
	}
}

// reportTime is the server's: set on a new entry and when the
// fingerprints change, kept when they do not (in any order); the client's
// value never lands.
func TestStatusStampsReportTime(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 500, time.UTC)
	clk := clocktesting.NewFakePassiveClock(t0)
	s := NewStatusStrategy(NewStrategy(runtime.NewScheme()), clk)
	forged := metav1.NewTime(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))

	old := consumer()
	report := old.DeepCopy()
	report.Spec.CertificateAuthorities = []string{"x"} // spec is not /status's
	report.Labels = map[string]string{"l": "v"}        // nor metadata
	report.Status.Holds = []rotation.TrustHeld{{CertificateAuthority: "a", Fingerprints: []string{fp(1), fp(2)}, ReportTime: &forged}}
	s.PrepareForUpdate(asUser("syncer"), report, old)
	if report.Spec.CertificateAuthorities[0] != "a" || report.Labels != nil {
		t.Fatalf("spec %+v, labels %v", report.Spec, report.Labels)
	}
	if got := report.Status.Holds[0].ReportTime; got == nil || !got.Time.Equal(t0.Truncate(time.Second)) {
		t.Fatalf("new entry: reportTime %v, want %v", got, t0)
	}
	if errs := s.ValidateUpdate(asUser("syncer"), report, old); len(errs) != 0 {
		t.Fatal(errs)
	}

	clk.SetTime(t0.Add(time.Minute))
	same := report.DeepCopy()
	same.Status.Holds[0].Fingerprints = []string{fp(2), fp(1)}
	same.Status.Holds[0].ReportTime = &forged
	same.Status.Holds = append(same.Status.Holds, rotation.TrustHeld{CertificateAuthority: "b"})
	s.PrepareForUpdate(asUser("syncer"), same, report)
	if got := same.Status.Holds[0].ReportTime; !got.Time.Equal(t0.Truncate(time.Second)) {
		t.Fatalf("unchanged entry: reportTime %v, want the first report's", got)
	}
	if got := same.Status.Holds[1].ReportTime; got == nil || !got.Time.Equal(t0.Add(time.Minute).Truncate(time.Second)) {
		t.Fatalf("new entry b: reportTime %v", got)
	}

	clk.SetTime(t0.Add(2 * time.Minute))
	changed := same.DeepCopy()
	changed.Status.Holds[0].Fingerprints = []string{fp(2), fp(3)}
	changed.Status.Holds[0].ReportTime = nil
	s.PrepareForUpdate(asUser("syncer"), changed, same)
	if got := changed.Status.Holds[0].ReportTime; got == nil || !got.Time.Equal(t0.Add(2*time.Minute).Truncate(time.Second)) {
		t.Fatalf("changed entry: reportTime %v", got)
	}
	if got := changed.Status.Holds[1].ReportTime; !got.Time.Equal(t0.Add(time.Minute).Truncate(time.Second)) {
		t.Fatalf("unchanged entry b: reportTime %v", got)
	}
}

func TestTable(t *testing.T) {
	tc := consumer()
	row := table.Row(tc)
	if row[0] != "a,b" || row[1] != "syncer" {
		t.Fatalf("row %v", row)
	}
}
