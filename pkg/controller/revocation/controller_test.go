package revocation

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
	informers "rekey.io/rekey/pkg/generated/informers/externalversions"
	"rekey.io/rekey/pkg/issuance"
)

var now = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

type records map[string]issuance.Record // by CA/serial

func (r records) BySerial(_ context.Context, ca, serial string) (issuance.Record, bool, error) {
	rec, ok := r[ca+"/"+serial]
	return rec, ok, nil
}

func rev(name, request, uid string, notAfter, revokedAt time.Time) *certv1alpha1.Revocation {
	return &certv1alpha1.Revocation{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("rev-" + name)},
		Spec:       certv1alpha1.RevocationSpec{CertificateSHA256: name, Reason: certv1alpha1.RevocationReasonKeyCompromise},
		Status: certv1alpha1.RevocationStatus{CertificateSHA256: name, SerialNumber: name, SignerName: "example.com/users", CAName: "ca", CAKeyID: "ca-1",
			Request: request, RequestUID: uid, NotAfter: metav1.NewTime(notAfter), RevocationTime: metav1.NewTime(revokedAt), RevokedBy: "alice"},
	}
}

func setup(t *testing.T, recs records, objs ...*certv1alpha1.Revocation) (*Controller, *fake.Clientset, *[]string) {
	csrs := []*certv1alpha1.CertificateSigningRequest{
		{ObjectMeta: metav1.ObjectMeta{Name: "laptop", UID: "csr-1"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "reused", UID: "csr-new"}},
	}
	client := fake.NewSimpleClientset()
	for _, c := range csrs {
		if _, err := client.CertificatesV1alpha1().CertificateSigningRequests().Create(context.Background(), c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	inf := factory.Certificates().V1alpha1().Revocations()
	for _, r := range objs {
		if err := inf.Informer().GetIndexer().Add(r); err != nil {
			t.Fatal(err)
		}
	}
	c := NewController(client, inf, recs, clocktesting.NewFakePassiveClock(now))
	var deleted []string
	c.delete = func(_ context.Context, name string, _ types.UID) error {
		deleted = append(deleted, name)
		return nil
	}
	return c, client, &deleted
}

func TestMarksTheRequestRevoked(t *testing.T) {
	notAfter := now.Add(24 * time.Hour)
	recs := records{"ca/a": {CAKeyID: "ca-1"}, "ca/b": {CAKeyID: "ca-1"}, "ca/c": {CAKeyID: "ca-1"}}
	c, client, deleted := setup(t, recs,
		rev("a", "laptop", "csr-1", notAfter, now.Add(-time.Minute)),
		rev("b", "reused", "csr-old", notAfter, now.Add(-time.Minute)),                 // the name now belongs to another request
		rev("c", "certificates.k8s.io:node-csr", "x", notAfter, now.Add(-time.Minute)), // not a rekey request
	)
	for _, name := range []string{"a", "b", "c"} {
		after, err := c.sync(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		if want := notAfter.Add(ExpiryMargin).Sub(now); after != want {
			t.Fatalf("%s: requeued after %s, want %s (its expiry)", name, after, want)
		}
	}
	csr, _ := client.CertificatesV1alpha1().CertificateSigningRequests().Get(context.Background(), "laptop", metav1.GetOptions{})
	cond := certv1alpha1.GetCondition(csr, certv1alpha1.CertificateRevoked)
	if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != "KeyCompromise" || cond.Message != "revoked by alice at 2026-11-24T11:59:00Z (Revocation a)" {
		t.Fatalf("Revoked condition: %+v", cond)
	}
	other, _ := client.CertificatesV1alpha1().CertificateSigningRequests().Get(context.Background(), "reused", metav1.GetOptions{})
	if certv1alpha1.GetCondition(other, certv1alpha1.CertificateRevoked) != nil {
		t.Fatal("a request of the same name but another UID was marked")
	}
	if len(*deleted) > 0 {
		t.Fatalf("deleted %v", *deleted)
	}
	// Again: the condition is there, nothing is written.
	writes := len(client.Actions())
	if _, err := c.sync(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	for _, a := range client.Actions()[writes:] {
		if a.GetVerb() != "get" {
			t.Fatalf("a second sync wrote: %v", a)
		}
	}
}

func TestDeletesExpiredAndDestroyedKeys(t *testing.T) {
	c, _, deleted := setup(t, records{"ca/live": {CAKeyID: "ca-1"}},
		rev("expired", "", "", now.Add(-ExpiryMargin-time.Second), now.Add(-48*time.Hour)),
		rev("justexpired", "", "", now.Add(-time.Minute), now.Add(-48*time.Hour)), // within the margin
		rev("live", "", "", now.Add(time.Hour), now.Add(-time.Minute)),
		rev("keygone", "", "", now.Add(time.Hour), now.Add(-time.Minute)),
		rev("keygoneold", "", "", now.Add(time.Hour), now.Add(-7*24*time.Hour)), // not looked at: too old
	)
	for _, name := range []string{"expired", "justexpired", "live", "keygone", "keygoneold", "missing"} {
		if _, err := c.sync(context.Background(), name); err != nil {
			t.Fatal(err)
		}
	}
	if got := *deleted; len(got) != 2 || got[0] != "expired" || got[1] != "keygone" {
		t.Fatalf("deleted %v, want [expired keygone]", got)
	}
}
