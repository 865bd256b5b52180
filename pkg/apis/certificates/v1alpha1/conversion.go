package v1alpha1

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
)

// SignerNameField is the field selector that approvers and signers use to
// watch only their own requests.
const SignerNameField = "spec.signerName"

// StateField selects requests by where they are in their life, computed
// from the conditions and the certificate (see the State* values): the
// controllers watch only the requests they act on.
const StateField = "state"

// Values of StateField.
const (
	// StatePending: neither approved nor denied.
	StatePending = "Pending"
	// StateApproved: approved, not failed, no certificate yet.
	StateApproved = "Approved"
	StateIssued   = "Issued"
	StateDenied   = "Denied"
	StateFailed   = "Failed"
)

func addConversionFuncs(scheme *runtime.Scheme) error {
	return scheme.AddFieldLabelConversionFunc(SchemeGroupVersion.WithKind("CertificateSigningRequest"),
		func(label, value string) (string, string, error) {
			switch label {
			case "metadata.name", SignerNameField, StateField:
				return label, value, nil
			default:
				return "", "", fmt.Errorf("field label %q is not supported for CertificateSigningRequest; supported: metadata.name, %s, %s", label, SignerNameField, StateField)
			}
		})
}
