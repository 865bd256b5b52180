// Package fuzzer fills certificates.rekey.io objects with random but
// plausible values for round-trip tests.
package fuzzer

import (
	runtimeserializer "k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/randfill"

	"rekey.io/rekey/pkg/apis/certificates"
)

// Funcs returns the fuzzer functions of the certificates group.
var Funcs = func(codecs runtimeserializer.CodecFactory) []interface{} {
	return []interface{}{
		func(spec *certificates.CertificateSigningRequestSpec, c randfill.Continue) {
			c.FillNoCustom(spec)
			// An empty map and a nil map serialize the same way.
			if len(spec.Extra) == 0 {
				spec.Extra = nil
			}
		},
		func(spec *certificates.SignerSpec, c randfill.Continue) {
			c.FillNoCustom(spec)
			// What v1alpha1 defaulting produces.
			if spec.Approval.Mode == "" {
				spec.Approval.Mode = certificates.ApprovalManual
			}
			// Empty lists are omitted on the wire and come back nil.
			nilIfEmpty(&spec.Policy.AllowedUsages)
			nilIfEmpty(&spec.Policy.RequiredUsages)
			nilIfEmpty(&spec.Policy.Subject.Organizations)
			nilIfEmpty(&spec.Policy.Subject.ForbiddenOrganizations)
			nilIfEmpty(&spec.Policy.SubjectAltNames.Allowed)
			nilIfEmpty(&spec.Policy.CRLDistributionPoints)
			if spec.HostCluster != nil && spec.HostCluster.PodCertificateRequests != nil {
				p := spec.HostCluster.PodCertificateRequests
				if len(p.Usages) == 0 {
					p.Usages = []certificates.KeyUsage{certificates.UsageDigitalSignature, certificates.UsageClientAuth, certificates.UsageServerAuth}
				}
				nilIfEmpty(&p.Allowed)
				nilIfEmpty(&p.DNSNames)
				nilIfEmpty(&p.KeyTypes)
				for i := range p.Allowed {
					nilIfEmpty(&p.Allowed[i].ServiceAccounts)
				}
			}
		},
		func(status *certificates.SignerStatus, c randfill.Continue) {
			c.FillNoCustom(status)
			if len(status.Conditions) == 0 {
				status.Conditions = nil
			}
		},
		func(spec *certificates.RevocationSpec, c randfill.Continue) {
			c.FillNoCustom(spec)
			// What v1alpha1 defaulting produces.
			if spec.Reason == "" {
				spec.Reason = certificates.RevocationReasonUnspecified
			}
		},
		func(cond *certificates.CertificateSigningRequestCondition, c randfill.Continue) {
			c.FillNoCustom(cond)
			if cond.Status == "" {
				cond.Status = "True"
			}
		},
	}
}

func nilIfEmpty[T any](s *[]T) {
	if len(*s) == 0 {
		*s = nil
	}
}
