package agent

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"

	"rekey.io/rekey/pkg/apis/certificates/validation"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/pkg/strictpem"
)

// EarlyRenewal is a renewal before the deadline because the issuing CA
// rotates away from the certificate's issuer.
type EarlyRenewal struct {
	// At is when: the zero time, or any time not after now, is at once.
	At time.Time
	// Reason says why, for the log.
	Reason string
}

// IssuerRotating says whether, and when, leaf must be renewed before its
// deadline because the CA behind signerName rotates away from the key that
// issued it, or because leaf is not from that CA at all (the agent now asks
// another signer: at once). known is false when the agent may not read the
// Signer or the CertificateAuthority (or they do not exist): it cannot tell,
// and a trust bundle file, if any, is the next thing to ask.
//
// Preparing renews nothing: the old CA still signs until the new one is
// trusted, so a renewal then would only be signed by the old key again.
// From Prepared (and in Completing), a certificate not signed by
// status.current is renewed at RenewalPoint: inside spec.rotation's
// renewalWindow after the rotation reached Prepared, at a point drawn from
// the certificate, so that thousands of nodes do not renew in one second.
func IssuerRotating(ctx context.Context, client clientset.Interface, signerName string, leaf *x509.Certificate) (r *EarlyRenewal, known bool, err error) {
	signer, err := client.CertificatesV1alpha1().Signers().Get(ctx, validation.SignerObjectName(signerName), metav1.GetOptions{})
	if apierrors.IsForbidden(err) || apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	ca, err := client.RotationV1alpha1().CertificateAuthorities().Get(ctx, signer.Spec.CertificateAuthorityRef.Name, metav1.GetOptions{})
	if apierrors.IsForbidden(err) || apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	// A certificate no CA of the signer's bundle issued is not the signer's
	// (the agent was pointed at another signer, say): renew for this one.
	if ca.Status.TrustBundle != "" {
		bundle, err := strictpem.Certificates([]byte(ca.Status.TrustBundle), 16)
		if err != nil {
			return nil, false, fmt.Errorf("CertificateAuthority %s: trust bundle: %w", ca.Name, err)
		}
		if !slices.ContainsFunc(bundle, func(c *x509.Certificate) bool { return leaf.CheckSignatureFrom(c) == nil }) {
			return &EarlyRenewal{Reason: fmt.Sprintf("the certificate is not from signer %s's CertificateAuthority %s", signerName, ca.Name)}, true, nil
		}
	}
	switch ca.Status.Phase {
	case rotationv1alpha1.PhasePrepared, rotationv1alpha1.PhaseCompleting:
		if ca.Status.Current == nil {
			return nil, true, nil
		}
		certs, err := strictpem.Certificates([]byte(ca.Status.Current.Certificate), 1)
		if err != nil {
			return nil, false, fmt.Errorf("CertificateAuthority %s: current certificate: %w", ca.Name, err)
		}
		if leaf.CheckSignatureFrom(certs[0]) == nil {
			return nil, true, nil
		}
		var prepared time.Time
		if t := ca.Status.LastInitiationFinishedTime; t != nil {
			prepared = t.Time
		}
		var window time.Duration
		if p := ca.Spec.Rotation; p != nil && p.RenewalWindow != nil {
			window = p.RenewalWindow.Duration
		}
		return &EarlyRenewal{
			At:     RenewalPoint(leaf, prepared, window),
			Reason: fmt.Sprintf("CertificateAuthority %s signs with a new key (rotation %s; renewal window %s)", ca.Name, ca.Status.Phase, window),
		}, true, nil
	}
	// Preparing included: the old key still signs.
	return nil, true, nil
}

// RenewalPoint is when a certificate of the previous CA is renewed after a
// rotation reached Prepared at prepared: prepared + f·window, f in [0, 1)
// drawn from the certificate's own bytes (the first 8 bytes of the
// SHA-256 of its DER). The draw is the same after a restart, and across
// nodes uniform, so that N nodes arrive at about N/window per second, not
// all at once. A zero prepared (a server that does not say) or a window
// of 0 or less is at once: the zero time.
func RenewalPoint(leaf *x509.Certificate, prepared time.Time, window time.Duration) time.Time {
	if prepared.IsZero() || window <= 0 {
		return time.Time{}
	}
	return prepared.Add(time.Duration(renewalFraction(leaf) * float64(window)))
}

// renewalFraction is the f of RenewalPoint. Of the 64 bits only the top 53
// are used: a float64 holds them exactly, so f never rounds up to 1.
// (CertificateJitter, which places the deadline, hashes with SHA-512: the
// two draws are independent.)
func renewalFraction(leaf *x509.Certificate) float64 {
	sum := sha256.Sum256(leaf.Raw)
	return float64(binary.BigEndian.Uint64(sum[:8])>>11) / (1 << 53)
}

// TrustBundleRotating is the check for an agent that may not read its CA:
// it reads the trust bundle the CA publishes, as a file (the ca.crt of a
// published ConfigMap, mounted). rekey writes the CA that signs first:
// during Preparing the bundle is the old CA (which still signs) and the
// new one; from Prepared the new one and the old one. leaf is renewed when
//
//   - the bundle's first CA did not issue leaf and is newer than the CA
//     that did (NotBefore later): the CA moved to a new key. While the
//     issuer is first (Preparing) nothing is renewed, although a newer CA
//     is in the bundle: the server would sign with the old key again; or
//   - no CA of the bundle issued leaf (the old CA is gone already, or the
//     bundle is another CA's);
//
// and in either case only when leaf was issued before the file last
// changed (its modification time). A renewal made because of a bundle
// gives a certificate issued after the bundle was written, which this
// rule does not renew again until the bundle changes: if the server keeps
// signing with a CA that the bundle does not put first (a bundle that is
// not rekey's, reordered, or stale), the agent renews once per change of
// the file, never in a loop. "Issued" is NotBefore + signing.Backdate:
// rekey's signers start certificates that long before they sign them.
// The node's clock (the file's time) and the server's (NotBefore) are
// compared: a node clock ahead by more than the spread below can cost a
// second renewal, not more, since the next certificate is issued later
// still.
//
// The agent cannot read spec.rotation.renewalWindow here, so it spreads
// over the default window (10m) from the file's change (about when it
// saw Prepared): RenewalPoint(leaf, mtime, DefaultRenewalWindow).
func TrustBundleRotating(path string, leaf *x509.Certificate) (*EarlyRenewal, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	data, err := readAllCapped(f, path)
	if err != nil {
		return nil, err
	}
	certs, err := strictpem.Certificates(data, 16)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	changed := info.ModTime()
	if !leaf.NotBefore.Add(signing.Backdate).Before(changed) {
		// Issued after the bundle was written: renewing again could only
		// repeat what gave this certificate.
		return nil, nil
	}
	var issuer *x509.Certificate
	for _, c := range certs {
		if leaf.CheckSignatureFrom(c) == nil {
			issuer = c
		}
	}
	if issuer == nil {
		// Not issued by any CA of the bundle: the old CA is gone already;
		// renewing is the only way back to a trusted certificate.
		return &EarlyRenewal{Reason: fmt.Sprintf("no CA in %s issued the certificate", path)}, nil
	}
	if first := certs[0]; first != issuer && first.NotBefore.After(issuer.NotBefore) {
		return &EarlyRenewal{
			At:     RenewalPoint(leaf, changed, rotationv1alpha1.DefaultRenewalWindow),
			Reason: fmt.Sprintf("%s puts a newer CA than the certificate's issuer first (it signs now)", path),
		}, nil
	}
	return nil, nil
}

// WatchIssuer sends on wake whenever the CertificateAuthority behind
// signerName changes, so that a rotation is acted on at once rather than at
// the next periodic look. newClient gives a client with the node's current
// credentials (nil while there is none). It returns when ctx is done, or
// at once when the agent may not read the Signer or the CA (the periodic
// look, or the trust bundle, is then all there is).
func WatchIssuer(ctx context.Context, newClient func() (clientset.Interface, error), signerName string, wake chan<- struct{}) {
	backoff := watchBackoff()
	for ctx.Err() == nil {
		err := watchIssuerOnce(ctx, newClient, signerName, wake)
		// A revoked certificate is refused with 403 too: the run loop
		// bootstraps a new one, with which the watch starts again.
		if apierrors.IsForbidden(err) && AsRevoked(err) == nil {
			klog.FromContext(ctx).Info("Not watching the issuing CA: no permission to read it", "signerName", signerName)
			return
		}
		if err == nil {
			// The watch ran until the server ended it: start again soon.
			backoff = watchBackoff()
		}
		timer := time.NewTimer(backoff.Step())
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
	}
}

// watchBackoff is the wait before watching the issuing CA again: 1s, then
// doubling up to a minute while the watch cannot be established.
func watchBackoff() wait.Backoff {
	return wait.Backoff{Duration: time.Second, Factor: 2, Cap: time.Minute, Steps: math.MaxInt32}
}

func watchIssuerOnce(ctx context.Context, newClient func() (clientset.Interface, error), signerName string, wake chan<- struct{}) error {
	client, err := newClient()
	if err != nil {
		return err
	}
	signer, err := client.CertificatesV1alpha1().Signers().Get(ctx, validation.SignerObjectName(signerName), metav1.GetOptions{})
	if err != nil {
		return err
	}
	name := signer.Spec.CertificateAuthorityRef.Name
	cas := client.RotationV1alpha1().CertificateAuthorities()
	ca, err := cas.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	w, err := cas.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(), ResourceVersion: ca.ResourceVersion})
	if err != nil {
		return err
	}
	defer w.Stop()
	// The CA may have changed while nothing watched it (before the first
	// certificate, after a broken watch): look once now.
	select {
	case wake <- struct{}{}:
	default:
	}
	last := renewalState(ca)
	for ev := range w.ResultChan() {
		if ev.Type == watch.Error {
			return fmt.Errorf("watching CertificateAuthority %s: %v", name, ev.Object)
		}
		if cur, ok := ev.Object.(*rotationv1alpha1.CertificateAuthority); ok && ev.Type == watch.Modified {
			// Most writes of a rotating CA are its counts (pending
			// renewals, trust consumers): thousands of agents reading
			// their Signer and CA again on each would be a storm of
			// GETs for nothing.
			state := renewalState(cur)
			if state == last {
				continue
			}
			last = state
		}
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// caRenewalState is what of a CA decides whether, and when, the agent
// renews (IssuerRotating): a change of anything else does not wake it.
type caRenewalState struct {
	phase                rotationv1alpha1.RotationPhase
	current, trustBundle string
	prepared             time.Time
	renewalWindow        time.Duration
}

func renewalState(ca *rotationv1alpha1.CertificateAuthority) caRenewalState {
	s := caRenewalState{phase: ca.Status.Phase, trustBundle: ca.Status.TrustBundle}
	if ca.Status.Current != nil {
		s.current = ca.Status.Current.Fingerprint
	}
	if t := ca.Status.LastInitiationFinishedTime; t != nil {
		s.prepared = t.Time
	}
	if r := ca.Spec.Rotation; r != nil && r.RenewalWindow != nil {
		s.renewalWindow = r.RenewalWindow.Duration
	}
	return s
}
