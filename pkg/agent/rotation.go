package agent

import (
	"context"
	"crypto/x509"
	"fmt"
	"math"
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
	"rekey.io/rekey/pkg/strictpem"
)

// IssuerRotating says whether the CA behind signerName is rotating away
// from the key that issued leaf: it has started making a new key
// (Preparing), or its current certificate, after Prepared, is not the
// leaf's issuer; or whether leaf is not from that CA at all (the agent now
// asks another signer). Renewing then, rather than at the deadline, moves the
// node to the new key before the old one stops being trusted (rotation
// runbook: the CA counts the certificates not renewed yet). An agent that
// may not read Signers or CertificateAuthorities cannot tell and answers
// false.
func IssuerRotating(ctx context.Context, client clientset.Interface, signerName string, leaf *x509.Certificate) (bool, string, error) {
	signer, err := client.CertificatesV1alpha1().Signers().Get(ctx, validation.SignerObjectName(signerName), metav1.GetOptions{})
	if apierrors.IsForbidden(err) || apierrors.IsNotFound(err) {
		return false, "", nil
	}
	if err != nil {
		return false, "", err
	}
	ca, err := client.RotationV1alpha1().CertificateAuthorities().Get(ctx, signer.Spec.CertificateAuthorityRef.Name, metav1.GetOptions{})
	if apierrors.IsForbidden(err) || apierrors.IsNotFound(err) {
		return false, "", nil
	}
	if err != nil {
		return false, "", err
	}
	// A certificate no CA of the signer's bundle issued is not the signer's
	// (the agent was pointed at another signer, say): renew for this one.
	if ca.Status.TrustBundle != "" {
		bundle, err := strictpem.Certificates([]byte(ca.Status.TrustBundle), 16)
		if err != nil {
			return false, "", fmt.Errorf("CertificateAuthority %s: trust bundle: %w", ca.Name, err)
		}
		if !slices.ContainsFunc(bundle, func(c *x509.Certificate) bool { return leaf.CheckSignatureFrom(c) == nil }) {
			return true, fmt.Sprintf("the certificate is not from signer %s's CertificateAuthority %s", signerName, ca.Name), nil
		}
	}
	switch ca.Status.Phase {
	case rotationv1alpha1.PhasePreparing:
		return true, fmt.Sprintf("CertificateAuthority %s is making a new key (rotation Preparing)", ca.Name), nil
	case rotationv1alpha1.PhasePrepared, rotationv1alpha1.PhaseCompleting:
		if ca.Status.Current == nil {
			return false, "", nil
		}
		certs, err := strictpem.Certificates([]byte(ca.Status.Current.Certificate), 1)
		if err != nil {
			return false, "", fmt.Errorf("CertificateAuthority %s: current certificate: %w", ca.Name, err)
		}
		if leaf.CheckSignatureFrom(certs[0]) != nil {
			return true, fmt.Sprintf("CertificateAuthority %s signs with a new key (rotation %s)", ca.Name, ca.Status.Phase), nil
		}
	}
	return false, "", nil
}

// TrustBundleRotating is the check for an agent that may not read its CA:
// it reads a trust bundle the operator distributes (a published ConfigMap
// mounted as a file, say). During a rotation the bundle holds the old CA
// and the new one; a CA in it that did not issue leaf and is newer than
// the one that did means the CA is moving to it, and leaf is renewed.
func TrustBundleRotating(path string, leaf *x509.Certificate) (bool, string, error) {
	data, err := readCapped(path)
	if err != nil {
		return false, "", err
	}
	certs, err := strictpem.Certificates(data, 16)
	if err != nil {
		return false, "", fmt.Errorf("%s: %w", path, err)
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
		return true, fmt.Sprintf("no CA in %s issued the certificate", path), nil
	}
	for _, c := range certs {
		if c != issuer && c.NotBefore.After(issuer.NotBefore) {
			return true, fmt.Sprintf("%s holds a newer CA than the certificate's issuer", path), nil
		}
	}
	return false, "", nil
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
		if apierrors.IsForbidden(err) {
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
	for ev := range w.ResultChan() {
		if ev.Type == watch.Error {
			return fmt.Errorf("watching CertificateAuthority %s: %v", name, ev.Object)
		}
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	return nil
}
