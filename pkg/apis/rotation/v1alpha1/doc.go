// +k8s:deepcopy-gen=package
// +k8s:conversion-gen=rekey.io/rekey/pkg/apis/rotation
// +k8s:defaulter-gen=TypeMeta
// +k8s:openapi-gen=true
// +k8s:protobuf-gen=package
// +k8s:openapi-model-package=io.rekey.rotation.v1alpha1
// +groupName=rotation.rekey.io

// Package v1alpha1 is the v1alpha1 version of the rotation.rekey.io API.
package v1alpha1
