package credential

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
)

// Security review (#31): RevokeWithOld takes any 404 from the Revocation
// create for "rekey no longer knows this certificate" and reports the
// generation revoked; the controller then drops the Secret's .old values
// and the request, so nothing names the certificate any more and it is
// never revoked. A 404 also comes from a server that does not serve
// revocations at all: a rekey replica of the previous version during a
// rolling upgrade (the aggregator sends the create to any replica), or a
// version skew between the controllers and the API. Only the storage's own
// "no certificate rekey issued" answer (status details kind revocations,
// the message) means done; a bare 404 must be retried.
func TestClientCertificateRetriesARevocationTheServerDoesNotServe(t *testing.T) {
	t.Parallel()
	rc := clientCertCredential()
	oldCrt, oldKey, _ := testPair(t, time.Now().Add(time.Hour))
	client := fake.NewSimpleClientset()
	client.PrependReactor("create", "revocations", func(k8stesting.Action) (bool, runtime.Object, error) {
		// What an API server answers for a resource it does not serve.
		return true, nil, apierrors.NewGenericServerResponse(404, "post", revocationsResource(), "", "the server could not find the requested resource", 0, true)
	})
	m := ClientCertificateMinter{Client: client}
	if err := m.RevokeWithOld(context.Background(), rc, 1, map[string][]byte{"tls.crt": oldCrt, "tls.key": oldKey}); err == nil {
		t.Fatal("a server that does not serve revocations answered 404 and the generation counts as revoked: its certificate is never revoked")
	}
}

func revocationsResource() schema.GroupResource {
	return schema.GroupResource{Group: "certificates.rekey.io", Resource: "revocations"}
}
