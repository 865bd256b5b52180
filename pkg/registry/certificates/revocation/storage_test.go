package revocation

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	clocktesting "k8s.io/utils/clock/testing"

	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/pkg/issuance"
)

const sha = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

type fakeRecords struct{ recs []issuance.Record }

func (f fakeRecords) BySHA256(_ context.Context, h string) (issuance.Record, bool, error) {
	for _, r := range f.recs {
		if r.SHA256 == strings.ToLower(h) {
			return r, true, nil
		}
	}
	return issuance.Record{}, false, nil
}

func (f fakeRecords) BySerial(_ context.Context, ca, serial string) (issuance.Record, bool, error) {
	var hits []issuance.Record
	for _, r := range f.recs {
		if r.Serial == serial && (ca == "" || ca == r.CAName) {
			hits = append(hits, r)
		}
	}
	switch len(hits) {
	case 0:
		return issuance.Record{}, false, nil
	case 1:
		return hits[0], true, nil
	}
	return issuance.Record{}, false, issuance.ErrAmbiguous
}

var notAfter = time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)

func testREST() *REST {
	return &REST{
		records: fakeRecords{recs: []issuance.Record{
			{Serial: "1f", SHA256: sha, CSRName: "alice-laptop", CSRUID: "uid-1", Requester: "alice", Subject: "CN=alice", SignerName: "example.com/users",
				CAName: "users-ca", CAKeyID: "users-ca-1", NotAfter: notAfter},
			{Serial: "2a", SHA256: strings.Repeat("ab", 32), CAName: "a", SignerName: "example.com/a"},
			{Serial: "2a", SHA256: strings.Repeat("cd", 32), CAName: "b", SignerName: "example.com/b"},
			{Serial: "3b", CAName: "a", SignerName: "example.com/a"}, // no SHA-256: an old record
		}},
		clock: clocktesting.NewFakePassiveClock(time.Date(2026, 11, 24, 12, 0, 0, 500, time.UTC)),
	}
}

func asUser(name string) context.Context {
	return genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: name})
}

// TestResolveFillsStatusFromTheRecord: whatever the client put in status
// (or name), the server's record fills it; the object is named by the
// certificate's SHA-256, revokedBy is the caller.
func TestResolveFillsStatusFromTheRecord(t *testing.T) {
	r := testREST()
	for name, spec := range map[string]certificates.RevocationSpec{
		"by sha256":       {CertificateSHA256: strings.ToUpper(sha), Reason: "KeyCompromise"},
		"by serial":       {SerialNumber: "1f", Reason: "KeyCompromise"},
		"by serial in CA": {SerialNumber: "1f", CAName: "users-ca", Reason: "KeyCompromise"},
	} {
		t.Run(name, func(t *testing.T) {
			rev := &certificates.Revocation{Spec: spec, Status: certificates.RevocationStatus{SignerName: "evil.com/x", RevokedBy: "bob", CAKeyID: "other"}}
			if err := r.resolve(asUser("carol"), rev); err != nil {
				t.Fatal(err)
			}
			want := certificates.RevocationStatus{CertificateSHA256: sha, SerialNumber: "1f", SignerName: "example.com/users", CAName: "users-ca", CAKeyID: "users-ca-1",
				Subject: "CN=alice", Requester: "alice", Request: "alice-laptop", RequestUID: "uid-1", NotAfter: metav1.NewTime(notAfter),
				RevocationTime: metav1.NewTime(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)), RevokedBy: "carol"}
			if rev.Name != sha || rev.Status != want {
				t.Fatalf("name %q status %+v, want %q %+v", rev.Name, rev.Status, sha, want)
			}
		})
	}
}

func TestResolveRefuses(t *testing.T) {
	r := testREST()
	tests := map[string]struct {
		rev   certificates.Revocation
		check func(error) bool
		msg   string
	}{
		"unknown sha": {rev: certificates.Revocation{Spec: certificates.RevocationSpec{CertificateSHA256: strings.Repeat("0", 64), Reason: "Unspecified"}},
			check: apierrors.IsNotFound, msg: "no certificate rekey issued has SHA-256 " + strings.Repeat("0", 64)},
		"unknown serial": {rev: certificates.Revocation{Spec: certificates.RevocationSpec{SerialNumber: "99", CAName: "a", Reason: "Unspecified"}},
			check: apierrors.IsNotFound, msg: "no certificate rekey issued has serial number 99 from CA a"},
		"serial of two CAs": {rev: certificates.Revocation{Spec: certificates.RevocationSpec{SerialNumber: "2a", Reason: "Unspecified"}},
			check: apierrors.IsInvalid, msg: "spec.serialNumber"},
		"old record": {rev: certificates.Revocation{Spec: certificates.RevocationSpec{SerialNumber: "3b", Reason: "Unspecified"}},
			check: apierrors.IsInvalid, msg: "predates the SHA-256"},
		"name of another certificate": {rev: certificates.Revocation{ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("ab", 32)}, Spec: certificates.RevocationSpec{CertificateSHA256: sha, Reason: "Unspecified"}},
			check: apierrors.IsInvalid, msg: "metadata.name"},
		"invalid spec": {rev: certificates.Revocation{Spec: certificates.RevocationSpec{Reason: "Unspecified"}},
			check: apierrors.IsInvalid, msg: "exactly one of certificateSHA256 and serialNumber"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := r.resolve(asUser("carol"), &tc.rev)
			if err == nil || !tc.check(err) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %v, want one with %q", err, tc.msg)
			}
		})
	}
}

// TestStrategy: a create whose status the server did not resolve is
// refused; an update keeps status and refuses a spec change.
func TestStrategy(t *testing.T) {
	s := NewStrategy(runtime.NewScheme())
	rev := &certificates.Revocation{ObjectMeta: metav1.ObjectMeta{Name: sha, ResourceVersion: "1"}, Spec: certificates.RevocationSpec{CertificateSHA256: sha, Reason: "Unspecified"}}
	s.PrepareForCreate(context.Background(), rev)
	if errs := s.Validate(context.Background(), rev); !strings.Contains(errs.ToAggregate().Error(), "status.signerName: Required value") {
		t.Fatalf("an unresolved revocation: %v", errs)
	}
	rev.Status = certificates.RevocationStatus{CertificateSHA256: sha, SignerName: "example.com/users"}
	if errs := s.Validate(context.Background(), rev); len(errs) > 0 {
		t.Fatalf("a resolved revocation: %v", errs)
	}
	upd := rev.DeepCopy()
	upd.Status.RevokedBy = "mallory"
	upd.Labels = map[string]string{"ticket": "1"}
	s.PrepareForUpdate(context.Background(), upd, rev)
	if upd.Status != rev.Status {
		t.Fatalf("an update changed status: %+v", upd.Status)
	}
	if errs := s.ValidateUpdate(context.Background(), upd, rev); len(errs) > 0 {
		t.Fatalf("a label update: %v", errs)
	}
	upd.Spec.Reason = "KeyCompromise"
	if errs := s.ValidateUpdate(context.Background(), upd, rev); len(errs) == 0 {
		t.Fatal("a spec change was accepted")
	}
	upd.Spec.Reason = rev.Spec.Reason
	upd.Finalizers = []string{"example.com/keep"}
	if errs := s.ValidateUpdate(context.Background(), upd, rev); !strings.Contains(errs.ToAggregate().Error(), "metadata.finalizers: Forbidden") {
		t.Fatalf("a finalizer added: %v", errs)
	}
	withOwner := rev.DeepCopy()
	withOwner.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "u"}}
	if errs := s.Validate(context.Background(), withOwner); !strings.Contains(errs.ToAggregate().Error(), "metadata.ownerReferences: Forbidden") {
		t.Fatalf("an owner at create: %v", errs)
	}
}

// TestDeleteIsTheControllersAlone: a client's delete is refused before
// the store is reached (the REST here has none).
func TestDeleteIsTheControllersAlone(t *testing.T) {
	r := testREST()
	_, _, err := r.Delete(asUser("admin"), sha, nil, &metav1.DeleteOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "a revocation is not undone") {
		t.Fatalf("delete: %v", err)
	}
	_, err = r.DeleteCollection(asUser("admin"), nil, &metav1.DeleteOptions{}, nil)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "a revocation is not undone") {
		t.Fatalf("deletecollection: %v", err)
	}
}

func TestTable(t *testing.T) {
	rev := &certificates.Revocation{ObjectMeta: metav1.ObjectMeta{Name: sha}, Spec: certificates.RevocationSpec{Reason: "KeyCompromise"},
		Status: certificates.RevocationStatus{SignerName: "example.com/users", Subject: "CN=alice", SerialNumber: "f", CAName: "users-ca", Request: "alice-laptop",
			RevokedBy: "carol", NotAfter: metav1.NewTime(notAfter), RevocationTime: metav1.Now()}}
	tbl, err := table.ConvertToTable(context.Background(), rev, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := tbl.Rows[0].Cells
	want := []interface{}{sha, "example.com/users", "CN=alice", "KeyCompromise", "0s", "2027-01-01T00:00:00Z", "0f", "users-ca", "alice-laptop", "carol"}
	if len(got) != len(want) || len(tbl.ColumnDefinitions) != len(want) {
		t.Fatalf("cells %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("cell %d (%s) = %v, want %v", i, tbl.ColumnDefinitions[i].Name, got[i], want[i])
		}
	}
}
