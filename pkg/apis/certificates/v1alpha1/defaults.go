package v1alpha1

import "k8s.io/apimachinery/pkg/runtime"

func addDefaultingFuncs(scheme *runtime.Scheme) error {
	return RegisterDefaults(scheme)
}

// SetDefaults_SignerSpec defaults the approval mode to Manual.
func SetDefaults_SignerSpec(obj *SignerSpec) {
	if obj.Approval.Mode == "" {
		obj.Approval.Mode = ApprovalManual
	}
}
