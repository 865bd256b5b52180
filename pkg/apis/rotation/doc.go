// +k8s:deepcopy-gen=package
// +groupName=rotation.rekey.io

// Package rotation is the internal version of the rotation.rekey.io API
// group: certificate authorities (and, later, rotating credentials).
package rotation
