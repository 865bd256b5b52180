// Package csrwait waits for one certificates.rekey.io
// CertificateSigningRequest to be decided: issued, or refused (Denied,
// Failed, its attestation refused). It watches the request (as the
// kubelet's k8s.io/client-go/util/certificate/csr.WaitForCertificate does
// for certificates.k8s.io) and never polls. rekey-agent and the
// RotatingCredential ClientCertificate minter both wait with it.
package csrwait

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
)

// RefusedError is a request that ended without a certificate and never
// will have one: Denied or Failed, or Attested=False (a refused
// attestation spends the challenge, so the request is never approved).
type RefusedError struct {
	Request string
	// Condition is the condition's type, or a caller's own word for a
	// refusal it finds itself ("not ours").
	Condition       string
	Reason, Message string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("certificate request %s was %s (%s): %s", e.Request, e.Condition, e.Reason, e.Message)
}

// ErrGone is wrapped by the error of a wait whose request was deleted, or
// deleted and made again (another UID: its certificate, if any, is not for
// the waiter's key).
var ErrGone = errors.New("the request is gone")

// Decided says whether csr is finished: issued (cert holds its
// certificate chain, as stored) or refused (err is a *RefusedError). A
// request with neither is still pending: false, nil, nil.
func Decided(csr *certv1alpha1.CertificateSigningRequest) (done bool, cert []byte, err error) {
	for _, c := range csr.Status.Conditions {
		if c.Type == certv1alpha1.CertificateDenied || c.Type == certv1alpha1.CertificateFailed ||
			(c.Type == certv1alpha1.CertificateAttested && c.Status == metav1.ConditionFalse) {
			return true, nil, &RefusedError{Request: csr.Name, Condition: string(c.Type), Reason: c.Reason, Message: c.Message}
		}
	}
	if len(csr.Status.Certificate) == 0 {
		return false, nil, nil
	}
	return true, bytes.Clone(csr.Status.Certificate), nil
}

// WaitForCertificate watches the request name, whose UID is uid, until it
// is decided, and returns its certificate chain (PEM, as stored). A
// refusal is a *RefusedError with the condition's reason and message; a
// request deleted or replaced meanwhile, or already gone when the wait
// begins (the caller made it before), wraps ErrGone; the end of ctx
// (bound the wait with a deadline) wraps context.Cause(ctx). A broken watch
// is re-established by the informer underneath, from a fresh list of the
// one request: the caller needs get, list and watch on
// certificatesigningrequests.
func WaitForCertificate(ctx context.Context, client clientset.Interface, name string, uid types.UID) ([]byte, error) {
	csrs := client.CertificatesV1alpha1().CertificateSigningRequests()
	fieldSelector := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
			options.FieldSelector = fieldSelector
			return csrs.List(ctx, options)
		},
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			options.FieldSelector = fieldSelector
			return csrs.Watch(ctx, options)
		},
	}, client)
	var cert []byte
	// The caller made the request before it waits: one not in the first
	// list was deleted already, and no event would ever say so. But that
	// list may come from a watch cache that lags the caller's create (the
	// informer's fallback list at resourceVersion "0"): only a consistent
	// read (a Get with default options) may say it is gone.
	existed := func(store cache.Store) (bool, error) {
		if _, exists, err := store.GetByKey(name); err != nil || exists {
			return false, err
		}
		csr, err := csrs.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return false, fmt.Errorf("certificate request %s was deleted before the wait for its certificate began: %w", name, ErrGone)
		case err != nil:
			return false, fmt.Errorf("certificate request %s is not in the first list; reading it: %w", name, err)
		case csr.UID != uid:
			return false, fmt.Errorf("certificate request %s was replaced before the wait for its certificate began (UID %s, not %s): %w", name, csr.UID, uid, ErrGone)
		}
		// There, the list only lagging: decided already, or the watch
		// (from the list's version) brings its changes.
		done, issued, err := Decided(csr)
		cert = issued
		return done, err
	}
	_, err := watchtools.UntilWithSync(ctx, lw, &certv1alpha1.CertificateSigningRequest{}, existed, func(ev watch.Event) (bool, error) {
		csr, ok := ev.Object.(*certv1alpha1.CertificateSigningRequest)
		// The server selects by name; a client that does not (a fake)
		// sends every request.
		if !ok || csr.Name != name {
			return false, nil
		}
		switch {
		case ev.Type == watch.Deleted:
			return false, fmt.Errorf("certificate request %s was deleted while waiting for its certificate: %w", name, ErrGone)
		case csr.UID != uid:
			return false, fmt.Errorf("certificate request %s was replaced while waiting for its certificate (UID %s, not %s): %w", name, csr.UID, uid, ErrGone)
		}
		done, issued, err := Decided(csr)
		cert = issued
		return done, err
	})
	if wait.Interrupted(err) {
		return nil, fmt.Errorf("certificate request %s: no certificate when the wait ended: %w", name, context.Cause(ctx))
	}
	if err != nil {
		return nil, err
	}
	return cert, nil
}
