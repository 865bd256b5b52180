package certificatesigningrequest

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/pkg/serveridentity"
)

var revoked = certificates.CertificateSigningRequestCondition{Type: certificates.CertificateRevoked, Status: metav1.ConditionTrue,
	Reason: "KeyCompromise", Message: "revoked by alice", LastUpdateTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now)}

// TestRevokedIsTheControllersAlone: through /status and /approval a client
// can neither remove, change nor add the Revoked condition; rekey's
// controllers add it.
func TestRevokedIsTheControllersAlone(t *testing.T) {
	base := testStrategy()
	client := genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: "signer"})
	id, err := serveridentity.New()
	if err != nil {
		t.Fatal(err)
	}
	controllers := id.WithUser(context.Background())
	type strat struct {
		prepare  func(context.Context, *certificates.CertificateSigningRequest, *certificates.CertificateSigningRequest)
		validate func(context.Context, *certificates.CertificateSigningRequest, *certificates.CertificateSigningRequest) field.ErrorList
	}
	st, ap := NewStatusStrategy(base), NewApprovalStrategy(base)
	for name, s := range map[string]strat{
		"status": {
			prepare: func(ctx context.Context, n, o *certificates.CertificateSigningRequest) {
				st.PrepareForUpdate(ctx, n, o)
			},
			validate: func(ctx context.Context, n, o *certificates.CertificateSigningRequest) field.ErrorList {
				return st.ValidateUpdate(ctx, n, o)
			},
		},
		"approval": {
			prepare: func(ctx context.Context, n, o *certificates.CertificateSigningRequest) {
				ap.PrepareForUpdate(ctx, n, o)
			},
			validate: func(ctx context.Context, n, o *certificates.CertificateSigningRequest) field.ErrorList {
				return ap.ValidateUpdate(ctx, n, o)
			},
		},
	} {
		t.Run(name+": removed or changed by a client, kept", func(t *testing.T) {
			old := newCSR(t)
			old.Status.Conditions = []certificates.CertificateSigningRequestCondition{revoked}
			for _, conds := range [][]certificates.CertificateSigningRequestCondition{nil, {{Type: certificates.CertificateRevoked, Status: metav1.ConditionFalse, Reason: "Oops"}}} {
				upd := old.DeepCopy()
				upd.Status.Conditions = conds
				s.prepare(client, upd, old)
				if c := certificates.GetCondition(upd, certificates.CertificateRevoked); c == nil || *c != revoked {
					t.Fatalf("Revoked after a client's write: %+v", c)
				}
				if errs := s.validate(client, upd, old); len(errs) > 0 {
					t.Fatalf("the write with Revoked kept was refused: %v", errs)
				}
			}
		})
		t.Run(name+": added by a client, refused", func(t *testing.T) {
			old := newCSR(t)
			upd := old.DeepCopy()
			upd.Status.Conditions = []certificates.CertificateSigningRequestCondition{revoked}
			s.prepare(client, upd, old)
			errs := s.validate(client, upd, old)
			if !strings.Contains(errs.ToAggregate().Error(), `a condition of type "Revoked" is recorded by rekey`) {
				t.Fatalf("a client adding Revoked: %v", errs)
			}
		})
	}
	t.Run("added by the controllers", func(t *testing.T) {
		old := newCSR(t)
		upd := old.DeepCopy()
		upd.Status.Conditions = []certificates.CertificateSigningRequestCondition{revoked}
		st.PrepareForUpdate(controllers, upd, old)
		if errs := st.ValidateUpdate(controllers, upd, old); len(errs) > 0 {
			t.Fatalf("the controllers adding Revoked: %v", errs)
		}
		if certificates.GetCondition(upd, certificates.CertificateRevoked) == nil {
			t.Fatal("the controllers' Revoked was dropped")
		}
	})
}
