// +k8s:deepcopy-gen=package
// +groupName=rotation.rekey.io

// Package rotation is the internal version of the rotation.rekey.io API
// group: CertificateAuthorities, RotatingCredentials, and the Rotation
// their rotate subresource takes.
package rotation
