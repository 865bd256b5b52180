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

// SetDefaults_PodCertificatePolicy defaults the usages to those of a
// workload identity certificate (mutual TLS both ways).
func SetDefaults_PodCertificatePolicy(obj *PodCertificatePolicy) {
	if len(obj.Usages) == 0 {
		obj.Usages = []KeyUsage{UsageDigitalSignature, UsageClientAuth, UsageServerAuth}
	}
}

// SetDefaults_RevocationSpec sets the reason to Unspecified when none is
// given (RFC 5280's reason code 0).
func SetDefaults_RevocationSpec(obj *RevocationSpec) {
	if obj.Reason == "" {
		obj.Reason = RevocationReasonUnspecified
	}
}
