// Package certificateauthority stores CertificateAuthorities.
package certificateauthority

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"

	"rekey.io/rekey/pkg/apis/rotation"
	"rekey.io/rekey/pkg/apis/rotation/validation"
	"rekey.io/rekey/pkg/registry/specstatus"
	"rekey.io/rekey/pkg/signing/keystorepaths"
)

var kind = specstatus.Kind[*rotation.CertificateAuthority]{
	APIVersion:              "rotation.rekey.io/v1alpha1",
	Spec:                    func(c *rotation.CertificateAuthority) any { return &c.Spec },
	Status:                  func(c *rotation.CertificateAuthority) any { return &c.Status },
	ResetStatus:             func(c *rotation.CertificateAuthority) { c.Status = rotation.CertificateAuthorityStatus{} },
	CopyStatus:              func(dst, src *rotation.CertificateAuthority) { dst.Status = src.Status },
	CopySpec:                func(dst, src *rotation.CertificateAuthority) { dst.Spec = src.Spec },
	Validate:                validation.ValidateCertificateAuthority,
	ValidateUpdate:          validation.ValidateCertificateAuthorityUpdate,
	ValidateStatusUpdate:    validation.ValidateCertificateAuthorityStatusUpdate,
	StatusByControllersOnly: true,
}

var table = specstatus.Table[*rotation.CertificateAuthority]{
	Columns: []metav1.TableColumnDefinition{
		{Name: "KeyStore", Type: "string", Description: "Where the private key lives."},
		{Name: "Algorithm", Type: "string", Description: "Key algorithm."},
		{Name: "Phase", Type: "string", Description: "Rotation phase."},
		{Name: "NotAfter", Type: "string", Description: "End of the current CA certificate's validity."},
		{Name: "Fingerprint", Type: "string", Priority: 1, Description: "SHA-256 of the current CA certificate."},
		{Name: "Ready", Type: "string", Description: "Whether the CA can sign."},
		{Name: "Age", Type: "string", Description: "Time since creation."},
	},
	Row: func(c *rotation.CertificateAuthority) []interface{} {
		notAfter, fingerprint := "<none>", "<none>"
		if cur := c.Status.Current; cur != nil {
			notAfter, fingerprint = cur.NotAfter.UTC().Format("2006-01-02T15:04:05Z"), cur.Fingerprint
		}
		phase := string(c.Status.Phase)
		if phase == "" {
			phase = "<none>"
		}
		return []interface{}{string(c.Spec.KeyStore.Type), string(c.Spec.KeyAlgorithm), phase, notAfter, fingerprint,
			specstatus.ConditionStatus(c.Status.Conditions, rotation.CertificateAuthorityReady), specstatus.Age(c.CreationTimestamp)}
	},
}

// NewStorage returns the main and /status storage. A new CA may name only
// the PKCS#11 modules and key-store files the server allows.
func NewStorage(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, allowed keystorepaths.Allowed) (*specstatus.REST, *specstatus.SubresourceREST, error) {
	kind := kind
	kind.Validate = func(ca *rotation.CertificateAuthority) field.ErrorList {
		return append(validation.ValidateCertificateAuthority(ca), validation.ValidateKeyStorePaths(ca, allowed)...)
	}
	return specstatus.NewStorage(scheme, optsGetter, specstatus.Resource[*rotation.CertificateAuthority]{
		New:        func() runtime.Object { return &rotation.CertificateAuthority{} },
		NewList:    func() runtime.Object { return &rotation.CertificateAuthorityList{} },
		Plural:     rotation.Resource("certificateauthorities"),
		Singular:   rotation.Resource("certificateauthority"),
		ShortNames: []string{"rca"},
		Table:      table,
		Kind:       kind,
	})
}
