package certificatesigningrequest

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/warning"

	"rekey.io/rekey/pkg/apis/certificates"
)

// DryRunner says what a request's signer would do with it, for a dry-run
// create (package issuer's Synchronous.DryRun): a warning's text, or ""
// for none.
type DryRunner interface {
	DryRun(ctx context.Context, csr *certificates.CertificateSigningRequest) string
}

// dryRunCreate is a create with dryRun=All. It decides nothing (no
// approval, no certificate, no record), but its response carries, as a
// warning, what the signer's policy would issue or the rule the request
// breaks (`kubectl rekey request --dry-run`, `kubectl create
// --dry-run=server`). The object the signer's policy is run on is the one
// validation and admission allowed, with the requester stamped from the
// authenticated user: the policy's commonNameIsRequester sees who asks.
func (r *REST) dryRunCreate(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	out, err := r.Store.Create(ctx, obj, createValidation, options)
	if err != nil || r.dryRunner == nil {
		return out, err
	}
	if csr, ok := out.(*certificates.CertificateSigningRequest); ok && isPending(csr) {
		if text := r.dryRunner.DryRun(ctx, csr); text != "" {
			warning.AddWarning(ctx, "", text)
		}
	}
	return out, nil
}
