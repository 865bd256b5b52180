package revocation

import (
	"context"
	"errors"
	"net/http"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/klog/v2"
)

// DefaultSyncHold is how long WithAuthenticator holds a certificate's
// request while the set has not synced yet (right after a start).
const DefaultSyncHold = 10 * time.Second

// WithAuthenticator wraps the server's whole authenticator: a user whose
// extra credential-id names a revoked certificate fails authentication
// (401), whichever authenticator took the request: a client certificate
// verified by rekey itself, or the front proxy's forwarded extra (a request
// kube-apiserver authenticated with that certificate and forwarded).
//
// Before the set has synced, a request that carries a certificate's
// credential-id waits for it (up to hold): the set normally loads within a
// second of the start, and answering meanwhile would either let a revoked
// certificate through (fail open) or refuse every certificate with a 401
// that clients do not retry (fail closed). Past the hold the request goes
// on, with an error logged: the set that cannot load means the server's own
// storage does not answer, and then the request fails anyway. Requests
// without such a credential-id (the controllers' own token, which the
// informer that fills the set needs, service account tokens) never wait.
func WithAuthenticator(set *Set, inner authenticator.Request, hold time.Duration) authenticator.Request {
	RegisterMetrics()
	return authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		resp, ok, err := inner.AuthenticateRequest(req)
		if !ok || err != nil || resp == nil || resp.User == nil {
			return resp, ok, err
		}
		ids := resp.User.GetExtra()[CredentialIDKey]
		if len(ids) == 0 {
			return resp, ok, err
		}
		var sums [][32]byte
		for _, id := range ids {
			if sum, isCert := ParseCredentialID(id); isCert {
				sums = append(sums, sum)
			}
		}
		if len(sums) == 0 {
			return resp, ok, err
		}
		if !set.HasSynced() && !waitForSync(req.Context(), set, hold) {
			klog.FromContext(req.Context()).Error(nil, "Revocations not loaded: authenticating a certificate without checking whether it is revoked", "user", resp.User.GetName(), "credentialID", ids, "waited", hold)
			return resp, ok, err
		}
		for _, sum := range sums {
			if e, revoked := set.Lookup(sum); revoked {
				authnRefused.Inc()
				reason := DenyReason(&e)
				klog.FromContext(req.Context()).Info("Refusing a revoked certificate", "user", resp.User.GetName(), "credentialID", CredentialIDPrefix+Hex(sum), "reason", e.Reason, "revocationTime", e.RevocationTime, "signer", e.SignerName)
				return nil, false, errors.New(reason)
			}
		}
		return resp, ok, err
	})
}

func waitForSync(ctx context.Context, set *Set, hold time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, hold)
	defer cancel()
	return set.WaitForSync(ctx)
}
