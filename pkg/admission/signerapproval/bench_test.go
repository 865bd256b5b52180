package signerapproval

import (
	"context"
	"testing"

	"rekey.io/rekey/pkg/admission/admissiontest"
)

// BenchmarkSignerApprovalCheck is the admission authorization check of an
// approval for a domain-wildcard grant (two authorizer calls).
func BenchmarkSignerApprovalCheck(b *testing.B) {
	fake := &admissiontest.Authorizer{T: b, Grants: []admissiontest.Grant{{User: "approver", Verb: "approve", Name: "example.com/*"}}}
	p := New()
	p.SetAuthorizer(fake.Authorizer())
	a := attrs(csr("example.com/signer"), csr("example.com/signer"), "approval", "approver")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		fake.Calls = fake.Calls[:0]
		if err := p.Validate(ctx, a, nil); err != nil {
			b.Fatal(err)
		}
	}
}
