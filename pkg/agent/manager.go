package agent

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	"rekey.io/rekey/pkg/csrwait"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	certclient "rekey.io/rekey/pkg/generated/clientset/versioned/typed/certificates/v1alpha1"
	"rekey.io/rekey/pkg/signing"
)

// Manager bootstraps and renews one certificate.
type Manager struct {
	Store    *Store
	Template Template
	// NewClient returns a client for the API: with current's credentials
	// when it is not nil (a renewal), else with the bootstrap credentials.
	NewClient func(current *tls.Certificate) (clientset.Interface, error)
	// ExpirationSeconds asks for a lifetime; nil leaves it to the signer.
	ExpirationSeconds *int32
	// WaitTimeout bounds one wait for a request to be decided.
	WaitTimeout time.Duration
	// Jitter places the renewal in [70%, 90%] of the lifetime; nil takes
	// it from the certificate.
	Jitter func() float64
	// RenewBefore, when set, renews no later than this long before the
	// certificate expires (earlier than the jittered deadline when that is
	// later).
	RenewBefore time.Duration
	// CheckIssuer, when set, is asked whether a certificate that is not due
	// must be renewed before its deadline because its issuing CA is
	// rotating (see IssuerRotating), and when: nil for not.
	CheckIssuer func(ctx context.Context, client clientset.Interface, leaf *x509.Certificate) (*EarlyRenewal, error)

	// Attestor, when set, puts TPM evidence in every request (a signer in
	// Attestation approval mode).
	Attestor *TPMAttestor

	// checkErr is the last CheckIssuer failure (nil after a success).
	checkErr error
	// early is when the current certificate is renewed because its CA
	// rotates, as the last CheckIssuer said (zero: not for that reason).
	early time.Time
	// noted is the early point last written to the store for
	// exec-credential.
	noted time.Time
	// announced is the early point last logged (logged once, not at
	// every look).
	announced time.Time
	// revocation is the certificate the server said is revoked.
	revocation revocationState
}

// IssuerCheckErr is why the last look at the issuing CA failed (the server
// unreachable, say), nil if it did not; the certificate in use stays in
// use meanwhile.
func (m *Manager) IssuerCheckErr() error { return m.checkErr }

// errRevokedDiscarded is why a discarded pair is not renewed with: the
// bootstrap credentials ask for a new one.
var errRevokedDiscarded = errors.New("the current certificate was revoked and discarded")

// Refusal is a request its signer or approver turned down (Denied,
// Failed, Attested=False), or one the agent refuses itself: a request of
// its name for another key, or one nothing will decide.
type Refusal = csrwait.RefusedError

// Due says whether cert must be renewed now: past its renewal deadline,
// or no longer what the template asks for.
func (m *Manager) Due(cert *x509.Certificate, now time.Time) bool {
	return !m.Template.Matches(cert) || !now.Before(m.Deadline(cert))
}

// NextLook is when cert is looked at again: its deadline, or the point
// the last look at its CA set for an early renewal when that comes first.
// Run sleeps until then.
func (m *Manager) NextLook(cert *x509.Certificate) time.Time {
	d := m.Deadline(cert)
	if !m.early.IsZero() && m.early.Before(d) {
		return m.early
	}
	return d
}

// Deadline is when cert is renewed: the jittered 70-90% point of its
// lifetime, or RenewBefore its expiry if that comes first.
func (m *Manager) Deadline(cert *x509.Certificate) time.Time {
	return renewalDeadline(cert, m.Jitter, m.RenewBefore)
}

// renewalDeadline is RotationDeadline, or renewBefore the expiry if that
// comes first; `run` and `exec-credential` both use it.
func renewalDeadline(cert *x509.Certificate, jitter func() float64, renewBefore time.Duration) time.Time {
	d := RotationDeadline(cert, jitter)
	if renewBefore > 0 {
		if early := cert.NotAfter.Add(-renewBefore); early.Before(d) {
			d = early
		}
	}
	return d
}

// Once makes sure a current certificate is in the store: it returns the
// current pair when it is not due, else asks for a new one and waits for
// it. A pair that is expired or does not parse is never used, not even to
// authenticate the renewal (the bootstrap credentials are used then).
//
// A current pair the server said is revoked (NoteRevoked, or a renewal
// refused with a 403 naming it) is discarded and a new one bootstrapped
// at once, with a new key and the bootstrap credentials.
func (m *Manager) Once(ctx context.Context) (*tls.Certificate, error) {
	pair, renewed, err := m.once(ctx)
	if revoked := AsRevoked(err); revoked != nil {
		// The renewal, made with the current pair, was refused because
		// that pair is revoked: bootstrap now rather than after a backoff.
		m.NoteRevoked(revoked.SHA256)
		if current, cerr := m.Store.Current(); cerr == nil && CertificateSHA256(current.Leaf) == revoked.SHA256 {
			klog.FromContext(ctx).Info("The renewal was refused: the current certificate is revoked", "prefix", m.Store.Prefix, "message", revoked.Message)
			pair, renewed, err = m.once(ctx)
		}
	}
	notAfter := time.Time{}
	if pair != nil {
		notAfter = pair.Leaf.NotAfter
	}
	if renewed {
		renewals.WithLabelValues(m.Store.Prefix).Inc()
	}
	m.observe(err, notAfter)
	m.observeValidity(pair)
	if pair != nil && !m.early.Equal(m.noted) {
		if noteErr := m.Store.SetEarlyRenewal(pair.Leaf, m.early); noteErr != nil {
			klog.FromContext(ctx).Info("Could not note the early renewal point for exec-credential", "prefix", m.Store.Prefix, "err", noteErr.Error())
		} else {
			m.noted = m.early
		}
	}
	early := 0.0
	if !m.early.IsZero() {
		early = float64(m.early.Unix())
	}
	earlyRenewalTime.WithLabelValues(m.Store.Prefix).Set(early)
	return pair, err
}

func (m *Manager) once(ctx context.Context) (*tls.Certificate, bool, error) {
	logger := klog.FromContext(ctx)
	current, err := m.Store.Current()
	m.early = time.Time{}
	if err == nil {
		discarded, derr := m.discardIfRevoked(ctx, current)
		if derr != nil {
			return nil, false, derr
		}
		if discarded {
			current, err = nil, errRevokedDiscarded
		}
	}
	if now := m.Store.now(); err == nil && !m.Due(current.Leaf, now) {
		early := m.issuerRotating(ctx, current)
		if early == nil {
			return current, false, nil
		}
		if now.Before(early.At) {
			// Not yet: the point drawn inside the renewal window is
			// ahead. Run wakes for it (NextLook).
			if !m.announced.Equal(early.At) {
				logger.Info("Renewing early, later in the renewal window", "prefix", m.Store.Prefix, "at", early.At.UTC(), "reason", early.Reason)
				m.announced = early.At
			}
			m.early = early.At
			return current, false, nil
		}
		logger.Info("Renewing before the deadline", "prefix", m.Store.Prefix, "reason", early.Reason)
	}
	switch {
	case err == nil:
		logger.Info("Renewing certificate", "prefix", m.Store.Prefix, "notAfter", current.Leaf.NotAfter)
	case errors.Is(err, ErrNoCertificate):
		logger.Info("No certificate yet: bootstrapping", "prefix", m.Store.Prefix)
	default:
		logger.Info("Not using the current certificate: bootstrapping", "prefix", m.Store.Prefix, "reason", err.Error())
		current = nil
	}
	client, err := m.NewClient(current)
	if err != nil {
		return nil, false, err
	}
	key, err := m.Store.PendingKey()
	if err != nil {
		return nil, false, &StoreError{fmt.Errorf("the pending key: %w", err)}
	}
	certPEM, err := m.request(ctx, client, key, current != nil)
	var refusal *Refusal
	if errors.As(err, &refusal) {
		// A refused key is not asked for again: the next attempt makes a
		// new key, and so a new request.
		_ = m.Store.DropPendingKey()
	}
	if err != nil {
		return nil, false, err
	}
	if _, err := m.Store.Update(certPEM, key); err != nil {
		return nil, false, &StoreError{err}
	}
	if err := m.Store.DropPendingKey(); err != nil {
		return nil, false, &StoreError{err}
	}
	stored, err := m.Store.Current()
	if err != nil {
		return nil, false, &StoreError{err}
	}
	logger.Info("Certificate stored", "prefix", m.Store.Prefix, "notAfter", stored.Leaf.NotAfter)
	return stored, true, nil
}

// issuerRotating asks CheckIssuer, with the current certificate's client;
// an error is logged and taken as "not rotating": the deadline still holds.
func (m *Manager) issuerRotating(ctx context.Context, current *tls.Certificate) *EarlyRenewal {
	if m.CheckIssuer == nil {
		return nil
	}
	client, err := m.NewClient(current)
	if err == nil {
		var early *EarlyRenewal
		if early, err = m.CheckIssuer(ctx, client, current.Leaf); err == nil {
			m.checkErr = nil
			return early
		}
	}
	m.checkErr = err
	renewalErrors.WithLabelValues(m.Store.Prefix, "issuer_check").Inc()
	klog.FromContext(ctx).Info("Could not look at the issuing CA; keeping the current certificate", "prefix", m.Store.Prefix, "err", err.Error())
	return nil
}

// request finds or creates the request for key and waits for its
// certificate.
func (m *Manager) request(ctx context.Context, client clientset.Interface, key crypto.Signer, renewing bool) ([]byte, error) {
	name, err := m.Template.RequestName(key.Public())
	if err != nil {
		return nil, err
	}
	csrs := client.CertificatesV1alpha1().CertificateSigningRequests()
	csr, err := csrs.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		var request []byte
		if request, err = m.Template.CSR(key); err != nil {
			return nil, err
		}
		if m.Attestor != nil {
			if request, err = m.Attestor.Request(ctx, client, request, key.Public()); err != nil {
				return nil, err
			}
		}
		csr, err = m.create(ctx, csrs, &certv1alpha1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: certv1alpha1.CertificateSigningRequestSpec{
				Request: request, SignerName: m.Template.SignerName, Usages: m.Template.Usages, ExpirationSeconds: m.ExpirationSeconds,
			},
		}, renewing)
		if apierrors.IsAlreadyExists(err) {
			csr, err = csrs.Get(ctx, name, metav1.GetOptions{})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("certificate request %s: %w", name, err)
	}
	if err := sameKey(csr, key); err != nil {
		return nil, err
	}
	if m.Attestor != nil && certv1alpha1.GetCondition(csr, certv1alpha1.CertificateAttested) == nil && len(csr.Status.Certificate) == 0 {
		// Attestation is decided in the create or never (the challenge is
		// single-use): a request without the outcome waits for nothing.
		return nil, &Refusal{Request: csr.Name, Condition: "not attested", Reason: "NotDecidedAtCreate",
			Message: "the server did not decide the attestation when the request was created (is the signer in Attestation mode, and this server's synchronous issuance on?)"}
	}
	return m.wait(ctx, client, csr, key)
}

// create posts a node client request without TPM evidence through
// certificatesigningrequests/NAME/selfnodeclient when renewing (the node's
// own credential) or .../nodeclient at bootstrap: the server authorizes
// that permission once and answers approved and signed. Where that path is
// refused (no such permission, the signer not in NodeClient mode, a server
// without it), the plain create, which a person may approve, follows.
func (m *Manager) create(ctx context.Context, csrs certclient.CertificateSigningRequestInterface, csr *certv1alpha1.CertificateSigningRequest, renewing bool) (*certv1alpha1.CertificateSigningRequest, error) {
	opts := metav1.CreateOptions{FieldManager: "rekey-agent"}
	if m.Template.NodeClient && m.Attestor == nil {
		create, path := csrs.CreateNodeClient, "nodeclient"
		if renewing {
			create, path = csrs.CreateSelfNodeClient, "selfnodeclient"
		}
		out, err := create(ctx, csr.Name, csr, opts)
		if err == nil || !apierrors.IsForbidden(err) && !apierrors.IsBadRequest(err) && !apierrors.IsNotFound(err) && !apierrors.IsMethodNotSupported(err) {
			return out, err
		}
		klog.FromContext(ctx).Info("Node client path refused: creating the request for approval", "request", csr.Name, "path", path, "reason", err.Error())
	}
	return csrs.Create(ctx, csr, opts)
}

// sameKey refuses a request of this name that is not for this key.
func sameKey(csr *certv1alpha1.CertificateSigningRequest, key crypto.Signer) error {
	req, err := validation.ParseStoredCSR(csr.Spec.Request)
	if err != nil || !signing.PublicKeysEqual(req.PublicKey, key.Public()) {
		return &Refusal{Request: csr.Name, Condition: "not ours", Reason: "KeyMismatch", Message: "a request of this name exists for another key"}
	}
	return nil
}

// wait returns the certificate of csr, which must be for key: at once
// when the request is decided already (a create answered with the
// certificate), else by watching the request (csrwait) until it is issued,
// refused, deleted or replaced, or WaitTimeout passes.
func (m *Manager) wait(ctx context.Context, client clientset.Interface, csr *certv1alpha1.CertificateSigningRequest, key crypto.Signer) ([]byte, error) {
	done, certPEM, err := csrwait.Decided(csr)
	if !done {
		timeout := m.WaitTimeout
		if timeout <= 0 {
			timeout = 15 * time.Minute
		}
		waitCtx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		certPEM, err = csrwait.WaitForCertificate(waitCtx, client, csr.Name, csr.UID)
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return nil, &TimeoutError{Request: csr.Name, Wait: timeout}
		}
	}
	if err != nil {
		return nil, err
	}
	certs, err := validation.ParseCertificateChain(certPEM)
	if err != nil {
		return nil, fmt.Errorf("certificate request %s: the certificate does not parse: %w", csr.Name, err)
	}
	if !signing.PublicKeysEqual(certs[0].PublicKey, key.Public()) {
		return nil, fmt.Errorf("certificate request %s: the certificate is not for the requested key", csr.Name)
	}
	return certPEM, nil
}
