package policy

import (
	"slices"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
)

// PrivilegedGroup is the group whose members bypass every authorization
// check in a Kubernetes cluster.
const PrivilegedGroup = "system:masters"

// ClientAuthUsable reports whether a certificate with these usages could
// authenticate a TLS client: it names "client auth" or "any", or it has no
// extended key usage at all, which Go's and OpenSSL's verifiers (and so
// kube-apiserver's) accept for any purpose.
func ClientAuthUsable(usages []string) bool {
	hasEKU := false
	for _, u := range usages {
		switch u {
		case "client auth", "any":
			return true
		}
		if isExtKeyUsage(u) {
			hasEKU = true
		}
	}
	return !hasEKU
}

func isExtKeyUsage(u string) bool {
	_, ok := extKeyUsages[certv1alpha1.KeyUsage(u)]
	return ok
}

// NamesPrivilegedGroup reports whether a subject's organizations, which
// kube-apiserver reads as groups, include system:masters.
func NamesPrivilegedGroup(organizations []string) bool {
	return slices.Contains(organizations, PrivilegedGroup)
}
