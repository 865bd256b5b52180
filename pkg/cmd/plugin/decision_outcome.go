package plugin

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/certificates/validation"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
)

var errRequestGone = errors.New("the request was deleted")

// waitForOutcome watches one approved request until it has its
// certificate or Failed, or ctx ends (bound it with a deadline), and
// returns the last version seen. It watches from the version the approval
// returned, so nothing written after the approval is missed, and reads the
// request again whenever the watch ends early (a server's watch timeout,
// a version too old). It does not use an informer: a reflector retries a
// refused list until the deadline and logs each refusal, while an approver
// who may not watch requests should hear once that approve cannot wait.
func waitForOutcome(ctx context.Context, client clientset.Interface, csr *certv1alpha1.CertificateSigningRequest) (*certv1alpha1.CertificateSigningRequest, error) {
	csrs := client.CertificatesV1alpha1().CertificateSigningRequests()
	selector := fields.OneTermEqualSelector("metadata.name", csr.Name).String()
	for !decided(csr) {
		started := time.Now()
		w, err := csrs.Watch(ctx, metav1.ListOptions{FieldSelector: selector, ResourceVersion: csr.ResourceVersion})
		if err != nil {
			if ctx.Err() != nil {
				return csr, ctx.Err()
			}
			return csr, err
		}
		csr, err = nextVersion(ctx, w, csr, func() (*certv1alpha1.CertificateSigningRequest, error) {
			fresh, err := csrs.Get(ctx, csr.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				return nil, errRequestGone
			case err != nil:
				return nil, err
			case fresh.UID != csr.UID:
				return nil, errRequestGone
			}
			return fresh, nil
		})
		w.Stop()
		if err != nil {
			return csr, err
		}
		if decided(csr) {
			break
		}
		// A watch that a server ends at once, again and again, is not
		// retried in a tight loop.
		if time.Since(started) < time.Second {
			select {
			case <-ctx.Done():
			case <-time.After(rewatchDelay):
			}
		}
		if ctx.Err() != nil {
			return csr, ctx.Err()
		}
	}
	return csr, nil
}

// rewatchDelay spaces watches that end as soon as they start.
const rewatchDelay = 250 * time.Millisecond

// nextVersion follows one watch until the request is decided or the watch
// ends; on an early end it reads the request again.
func nextVersion(ctx context.Context, w watch.Interface, csr *certv1alpha1.CertificateSigningRequest, reread func() (*certv1alpha1.CertificateSigningRequest, error)) (*certv1alpha1.CertificateSigningRequest, error) {
	for {
		select {
		case <-ctx.Done():
			return csr, ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type == watch.Error {
				fresh, err := reread()
				if err != nil {
					return csr, err
				}
				return fresh, nil
			}
			got, isCSR := ev.Object.(*certv1alpha1.CertificateSigningRequest)
			// The server selects by name; a client that does not (a fake)
			// sends every request.
			if !isCSR || got.Name != csr.Name {
				continue
			}
			if ev.Type == watch.Deleted || got.UID != csr.UID {
				return csr, errRequestGone
			}
			csr = got
			if decided(csr) {
				return csr, nil
			}
		}
	}
}

// whyNotIssued says why an approved request has no certificate, from its
// Signer and CertificateAuthority, in the order a person would check:
// is there a Signer, is it Ready, does its CA exist, is it Ready, has it
// a key, is it rotating. Anything it may not read is named: it then
// cannot tell.
func whyNotIssued(ctx context.Context, client clientset.Interface, csr *certv1alpha1.CertificateSigningRequest) string {
	signerName := csr.Spec.SignerName
	signer, err := client.CertificatesV1alpha1().Signers().Get(ctx, validation.SignerObjectName(signerName), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("no Signer serves signer name %q, so rekey will not sign it: a signer outside rekey has to (or create a Signer for %q)", signerName, signerName)
	case err != nil:
		return fmt.Sprintf("cannot tell why: cannot read the Signer of %q: %s", signerName, statusMessage(err))
	}
	if ready := apimeta.FindStatusCondition(signer.Status.Conditions, certv1alpha1.SignerReady); ready != nil && ready.Status != metav1.ConditionTrue {
		return fmt.Sprintf("Signer %q is not Ready (%s): %s", signer.Name, ready.Reason, ready.Message)
	}
	caName := signer.Spec.CertificateAuthorityRef.Name
	ca, err := client.RotationV1alpha1().CertificateAuthorities().Get(ctx, caName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("CertificateAuthority %q of Signer %q does not exist: rekey signs the request once it does", caName, signer.Name)
	case err != nil:
		return fmt.Sprintf("cannot tell why: cannot read CertificateAuthority %q of Signer %q: %s", caName, signer.Name, statusMessage(err))
	}
	ready := apimeta.FindStatusCondition(ca.Status.Conditions, rotationv1alpha1.CertificateAuthorityReady)
	switch {
	case ready != nil && ready.Status != metav1.ConditionTrue:
		return fmt.Sprintf("CertificateAuthority %q is not Ready (%s): %s: rekey signs the request once it is", caName, ready.Reason, ready.Message)
	case ca.Status.Current == nil:
		return fmt.Sprintf("CertificateAuthority %q has no key yet (it is being made): rekey signs the request once it has", caName)
	case ready == nil:
		return fmt.Sprintf("CertificateAuthority %q does not report Ready yet: rekey signs the request once it does", caName)
	case ca.Status.Phase == rotationv1alpha1.PhasePreparing:
		return fmt.Sprintf("CertificateAuthority %q is Preparing a rotation (its current CA still signs; kubectl rekey status %s shows the rotation); the signer controller signs it when it can (kubectl get rcsr %s -w)", caName, caName, csr.Name)
	}
	return fmt.Sprintf("Signer %q and CertificateAuthority %q are Ready; the signer controller signs it when it can (kubectl get rcsr %s -w)", signer.Name, caName, csr.Name)
}
