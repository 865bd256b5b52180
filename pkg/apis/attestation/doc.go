// +k8s:deepcopy-gen=package
// +groupName=attestation.rekey.io

// Package attestation is the internal version of the attestation.rekey.io
// API group: TPM node attestation that gates automatic approval.
package attestation
