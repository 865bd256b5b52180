// Package attest verifies TPM evidence server-side, in pure Go: the
// attestation key's public area and the quote a node makes with it. The
// Attestation approval mode calls it; nothing here trusts a value the node
// reports without recomputing it from what the server holds.
package attest
