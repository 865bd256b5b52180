// +k8s:deepcopy-gen=package
// +groupName=certificates.rekey.io

// Package certificates is the internal version of the certificates.rekey.io
// API group: certificate signing requests and the signers that serve them.
package certificates
