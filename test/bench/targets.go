package main

import (
	"context"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
)

// rekeyTarget drives certificates.rekey.io.
type rekeyTarget struct {
	client     clientset.Interface
	signerName string
	usages     []certv1alpha1.KeyUsage
	// autoApproved skips the approval step (NodeClient signers).
	autoApproved bool
}

func (r *rekeyTarget) Create(ctx context.Context, name string, request []byte) (bool, error) {
	out, err := r.client.CertificatesV1alpha1().CertificateSigningRequests().Create(ctx, &certv1alpha1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certv1alpha1.CertificateSigningRequestSpec{
			Request: request, SignerName: r.signerName, Usages: r.usages, ExpirationSeconds: ptr.To[int32](3600),
		},
	}, metav1.CreateOptions{})
	return err == nil && len(out.Status.Certificate) > 0, err
}

func (r *rekeyTarget) Approve(ctx context.Context, name string) (bool, error) {
	if r.autoApproved {
		return false, nil
	}
	// One request, one write: the approval carries only the name and the
	// condition, as an unconditional update; /approval keeps the stored
	// spec, so nothing needs to be read first. (Both APIs allow this.)
	csr := &certv1alpha1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: name}}
	csr.Status.Conditions = append(csr.Status.Conditions, certv1alpha1.CertificateSigningRequestCondition{
		Type: certv1alpha1.CertificateApproved, Status: metav1.ConditionTrue, Reason: "Bench",
	})
	out, err := r.client.CertificatesV1alpha1().CertificateSigningRequests().UpdateApproval(ctx, name, csr, metav1.UpdateOptions{})
	return err == nil && len(out.Status.Certificate) > 0, err
}

func (r *rekeyTarget) Watch(ctx context.Context, done func(string, bool)) error {
	csrs := r.client.CertificatesV1alpha1().CertificateSigningRequests()
	return watchForever(ctx, func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		opts.AllowWatchBookmarks = true
		return csrs.Watch(ctx, opts)
	}, func(first bool) (string, error) {
		// After a broken watch, a list catches what was issued meanwhile.
		list, err := csrs.List(ctx, listOptions(first))
		if err != nil {
			return "", err
		}
		for i := range list.Items {
			reportRekey(&list.Items[i], done)
		}
		return list.ResourceVersion, nil
	}, func(obj runtime.Object) {
		if csr, ok := obj.(*certv1alpha1.CertificateSigningRequest); ok {
			reportRekey(csr, done)
		}
	})
}

func reportRekey(csr *certv1alpha1.CertificateSigningRequest, done func(string, bool)) {
	if len(csr.Status.Certificate) > 0 {
		done(csr.Name, false)
		return
	}
	for _, c := range csr.Status.Conditions {
		if c.Type == certv1alpha1.CertificateFailed || c.Type == certv1alpha1.CertificateDenied {
			done(csr.Name, true)
		}
	}
}

// watchForever keeps a watch open until ctx is done. client-go's retry
// watcher resumes a closed watch from the last resource version it saw;
// when that version is too old for the server, it gives up, and the loop
// lists again (reporting what happened meanwhile) and starts a new one.
func watchForever(ctx context.Context, watchFunc cache.WatchFuncWithContext, relist func(first bool) (string, error), handle func(runtime.Object)) error {
	rv, err := relist(true)
	if err != nil {
		return err
	}
	lw := &cache.ListWatch{WatchFuncWithContext: watchFunc}
	go func() {
		for ctx.Err() == nil {
			rw, err := watchtools.NewRetryWatcherWithContext(ctx, rv, lw)
			if err == nil {
				for ev := range rw.ResultChan() {
					if ev.Type == watch.Modified || ev.Type == watch.Added {
						handle(ev.Object)
					}
				}
				rw.Stop()
			}
			if ctx.Err() != nil {
				return
			}
			if listRV, err := relist(false); err == nil {
				rv = listRV
			}
		}
	}()
	return nil
}

// listOptions: the first list of a round only gives the watch a resource
// version to start from (the round's names are new, so nothing stored
// before it is waited for); listing every stored request there would make
// each round cost more than the last, in the server CPU it reports. A
// list after a broken watch reads everything, for what was issued meanwhile.
func listOptions(first bool) metav1.ListOptions {
	if first {
		return metav1.ListOptions{Limit: 1}
	}
	return metav1.ListOptions{ResourceVersion: "0"}
}

// nativeTarget drives certificates.k8s.io/v1 with kube-controller-manager.
type nativeTarget struct {
	client     kubernetes.Interface
	signerName string
}

func (n *nativeTarget) Create(ctx context.Context, name string, request []byte) (bool, error) {
	_, err := n.client.CertificatesV1().CertificateSigningRequests().Create(ctx, &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request: request, SignerName: n.signerName, ExpirationSeconds: ptr.To[int32](3600),
			Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}, metav1.CreateOptions{})
	return false, err
}

func (n *nativeTarget) Approve(ctx context.Context, name string) (bool, error) {
	csr := &certificatesv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: name}}
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "Bench",
	})
	_, err := n.client.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, name, csr, metav1.UpdateOptions{})
	return false, err
}

func (n *nativeTarget) Watch(ctx context.Context, done func(string, bool)) error {
	csrs := n.client.CertificatesV1().CertificateSigningRequests()
	report := func(csr *certificatesv1.CertificateSigningRequest) {
		if len(csr.Status.Certificate) > 0 {
			done(csr.Name, false)
			return
		}
		for _, c := range csr.Status.Conditions {
			if c.Type == certificatesv1.CertificateFailed || c.Type == certificatesv1.CertificateDenied {
				done(csr.Name, true)
			}
		}
	}
	return watchForever(ctx, func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		opts.AllowWatchBookmarks = true
		return csrs.Watch(ctx, opts)
	}, func(first bool) (string, error) {
		list, err := csrs.List(ctx, listOptions(first))
		if err != nil {
			return "", err
		}
		for i := range list.Items {
			report(&list.Items[i])
		}
		return list.ResourceVersion, nil
	}, func(obj runtime.Object) {
		if csr, ok := obj.(*certificatesv1.CertificateSigningRequest); ok {
			report(csr)
		}
	})
}
