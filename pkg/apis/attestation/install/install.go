// Package install registers the attestation.rekey.io group in a scheme.
package install

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	"rekey.io/rekey/pkg/apis/attestation"
	"rekey.io/rekey/pkg/apis/attestation/v1alpha1"
)

// Install registers the internal and v1alpha1 types, preferring v1alpha1.
func Install(scheme *runtime.Scheme) {
	utilruntime.Must(attestation.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	utilruntime.Must(scheme.SetVersionPriority(v1alpha1.SchemeGroupVersion))
}
