// +k8s:deepcopy-gen=package
// +k8s:conversion-gen=rekey.io/rekey/pkg/apis/certificates
// +k8s:defaulter-gen=TypeMeta
// +k8s:openapi-gen=true
// +k8s:protobuf-gen=package
// +k8s:openapi-model-package=io.rekey.certificates.v1alpha1
// +groupName=certificates.rekey.io

// Package v1alpha1 is the v1alpha1 version of the certificates.rekey.io API:
// the same JSON shape as certificates.k8s.io/v1 CertificateSigningRequest.
package v1alpha1
