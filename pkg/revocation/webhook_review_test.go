package revocation

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
)

// Security review (#31): kube-apiserver (AuthorizeWithSelectors, GA) puts
// a list request's label and field selector requirements into the
// SubjectAccessReview it sends the webhook. The holder of a revoked
// certificate chooses the selector: a URL of about 30 KB
// (?labelSelector=k!=v0,k!=v1,...) makes a review of well over 64 KiB,
// which the webhook answers 413. kube-apiserver takes any non-2xx answer
// as a webhook failure and applies the failurePolicy: with the documented
// NoOpinion, RBAC then decides and the revoked certificate lists (or
// watches, or deletecollections) whatever it could before its revocation,
// matching nearly everything (k!=v0,... excludes almost nothing).
//
// The webhook must still deny a revoked certificate whatever the size of
// the review kube-apiserver sends (kube-apiserver's own request limit is
// its 1 MiB header limit for the URL, and JSON escaping grows that).
func TestWebhookDeniesRevokedCertificateWithLargeSelector(t *testing.T) {
	revoked := sum("revoked-with-large-selector")
	set, _ := setWith(t, revocationOf(revoked, certv1alpha1.RevocationReasonKeyCompromise))
	h := NewWebhook(set)

	// What the attacker sends to kube-apiserver: a list of secrets with a
	// label selector that excludes nothing that exists.
	var terms []string
	for i := range 4000 {
		terms = append(terms, fmt.Sprintf("k!=v%d", i))
	}
	selector := strings.Join(terms, ",")
	reqs, selectable := mustParse(t, selector)
	if !selectable {
		t.Fatal("kube-apiserver would not parse the selector")
	}
	t.Logf("URL query: %d bytes", len("labelSelector=")+len(selector))

	// The review as kube-apiserver's webhook authorizer builds it
	// (resourceAttributesFrom in k8s.io/apiserver/plugin/pkg/authorizer/webhook).
	var lsr []metav1.LabelSelectorRequirement
	for _, r := range reqs {
		lsr = append(lsr, metav1.LabelSelectorRequirement{Key: r.Key(), Operator: metav1.LabelSelectorOpNotIn, Values: r.Values().List()})
	}
	body, err := json.Marshal(&authorizationv1.SubjectAccessReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SubjectAccessReview"},
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: "alice", Groups: []string{"dev", "system:authenticated"},
			Extra: map[string]authorizationv1.ExtraValue{CredentialIDKey: {CredentialIDPrefix + Hex(revoked)}},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: "team-a", Verb: "list", Version: "v1", Resource: "secrets",
				LabelSelector: &authorizationv1.LabelSelectorAttributes{Requirements: lsr},
			},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("SubjectAccessReview: %d bytes (webhook limit %d)", len(body), MaxRequestBytes)

	rec := post(h, body)
	if rec.Code != http.StatusOK {
		t.Fatalf("the webhook answered %d (%s): kube-apiserver applies failurePolicy NoOpinion (docs/revocation.md) and RBAC lets the revoked certificate list secrets", rec.Code, strings.TrimSpace(rec.Body.String()))
	}
	if st := decodeStatus(t, rec); !st.Denied {
		t.Fatalf("revoked certificate not denied: %+v", st)
	}
}

func mustParse(t *testing.T, selector string) (labels.Requirements, bool) {
	t.Helper()
	sel, err := labels.Parse(selector)
	if err != nil {
		t.Fatalf("parsing the selector: %v", err)
	}
	return sel.Requirements()
}

// Security review (#31): the webhook is served without authentication,
// outside kube's handler chain (no max-in-flight limit, no request
// timeout: publicpaths.Wrap is outermost). An unauthenticated client that
// sends a review's headers and then trickles (or never sends) its body
// holds a goroutine and a pooled buffer of up to 64 KiB for as long as it
// likes: ten thousand such connections (or HTTP/2 streams) hold more than
// 600 MiB. A replica killed for its memory, or too slow to answer
// kube-apiserver within the webhook's 3 s timeout, makes kube-apiserver
// fail open (failurePolicy NoOpinion) for every revoked certificate.
//
// The webhook must bound how long it reads a body (kube-apiserver sends a
// review in one write, well within its own timeout).
func TestWebhookDoesNotWaitForeverForABody(t *testing.T) {
	set, _ := setWith(t)
	srv := httptest.NewServer(NewWebhook(set))
	t.Cleanup(srv.Close)

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	// Headers and the first bytes of a 60,000-byte body, then nothing.
	if _, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: rekey\r\nContent-Type: application/json\r\nContent-Length: 60000\r\n\r\n{\"apiVersion\":", Path); err != nil {
		t.Fatal(err)
	}
	const bound = 10 * time.Second
	_ = conn.SetReadDeadline(time.Now().Add(bound))
	buf := make([]byte, 512)
	n, err := conn.Read(buf)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("after %s the webhook still waits for the body of an unauthenticated client (no read deadline on the public path)", bound)
	}
	t.Logf("answered: %q, %v", buf[:n], err)
}

// Security review (#31), hardening: the webhook decodes the review with
// encoding/json into a struct, whose field names match keys
// case-insensitively with Unicode folding, the last match winning.
// kube-apiserver's extra is a map with exact keys, marshalled in sorted
// byte order, so a key that folds to the credential-id key and sorts after
// it (a Kelvin sign U+212A for the k of kubernetes) replaces the real
// credential-id: the webhook sees no certificate and answers NoOpinion.
// No authenticator gives a client-certificate user such an extra today
// (impersonation is checked with the impersonator's own credential-id
// first), so this is not exploitable as such; but what the webhook reads
// must be exactly the key kube-apiserver's matchConditions read.
func TestWebhookReadsOnlyTheExactCredentialIDKey(t *testing.T) {
	revoked := sum("revoked-exact-key")
	set, _ := setWith(t, revocationOf(revoked, certv1alpha1.RevocationReasonKeyCompromise))
	rec := post(NewWebhook(set), sar(map[string]authorizationv1.ExtraValue{
		CredentialIDKey: {CredentialIDPrefix + Hex(revoked)},
		"authentication.\u212aubernetes.io/credential-id": {"JTI=0"},
	}))
	if st := decodeStatus(t, rec); !st.Denied {
		t.Fatalf("a revoked certificate's review with a look-alike extra key was not denied: %+v", st)
	}
}
