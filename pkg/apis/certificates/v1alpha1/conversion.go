package v1alpha1

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
)

// SignerNameField is the field selector that approvers and signers use to
// watch only their own requests.
const SignerNameField = "spec.signerName"

func addConversionFuncs(scheme *runtime.Scheme) error {
	return scheme.AddFieldLabelConversionFunc(SchemeGroupVersion.WithKind("CertificateSigningRequest"),
		func(label, value string) (string, string, error) {
			switch label {
			case "metadata.name", SignerNameField:
				return label, value, nil
			default:
				return "", "", fmt.Errorf("field label %q is not supported for CertificateSigningRequest; supported: metadata.name, %s", label, SignerNameField)
			}
		})
}
