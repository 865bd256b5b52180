// +k8s:deepcopy-gen=package
// +k8s:conversion-gen=rekey.io/rekey/pkg/apis/attestation
// +k8s:defaulter-gen=TypeMeta
// +k8s:openapi-gen=true
// +k8s:protobuf-gen=package
// +k8s:openapi-model-package=io.rekey.attestation.v1alpha1
// +groupName=attestation.rekey.io

// Package v1alpha1 is the v1alpha1 version of the attestation.rekey.io API.
package v1alpha1
