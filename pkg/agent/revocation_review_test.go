package agent

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Security review (#31): AsRevoked takes any 403 whose message contains
// "X509SHA256=<hex> was revoked" anywhere for a revocation, and the agent
// then deletes its pair and must bootstrap again (a node whose bootstrap
// token has expired stays without a client certificate: NotReady). The
// hash is no secret (it is in every audit log entry and in the node's
// SelfSubjectReview), and the text of a 403 is not only rekey's: an
// admission webhook or a ValidatingAdmissionPolicy that matches
// selfsubjectreviews (or the agent's CSR creates) writes its own message,
// with messageExpression from request.userInfo.extra. Such a denial must
// not count as a revocation: only kube-apiserver's authorization refusal
// carrying rekey's reason should (and better, the agent should confirm it
// in the CA's signed CRL before discarding its pair).
func TestAsRevokedIgnoresAnAdmissionDenial(t *testing.T) {
	sha := strings.Repeat("ab", 32)
	gr := schema.GroupResource{Group: "authentication.k8s.io", Resource: "selfsubjectreviews"}
	for name, err := range map[string]error{
		"an admission webhook's denial": apierrors.NewForbidden(gr, "", fmt.Errorf(`admission webhook "audit.example.com" denied the request: X509SHA256=%s was revoked`, sha)),
		"a ValidatingAdmissionPolicy's denial": apierrors.NewForbidden(gr, "",
			fmt.Errorf("ValidatingAdmissionPolicy 'p' with binding 'b' denied request: rekey: certificate X509SHA256=%s was revoked (KeyCompromise)", sha)),
		"a message that only quotes it": apierrors.NewForbidden(gr, "", errors.New("policy says: not 'X509SHA256="+sha+" was revoked'")),
	} {
		if r := AsRevoked(err); r != nil {
			t.Errorf("%s: taken for a revocation of %s: the agent would discard a good certificate", name, r.SHA256)
		}
	}
}
