// Package agent keeps a node's certificates current, as the kubelet's
// certificate manager does against certificates.k8s.io: Run bootstraps the
// node's client certificate (and, when asked, its serving certificate)
// through certificates.rekey.io, keeps each pair in a private directory
// (Store), and renews it at a jittered point of its lifetime or as soon as
// its issuing CertificateAuthority rotates.
package agent
