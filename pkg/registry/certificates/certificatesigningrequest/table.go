package certificatesigningrequest

import (
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"rekey.io/rekey/pkg/apis/certificates"
	"rekey.io/rekey/pkg/registry/printers"
)

// tableConvertor prints the columns `kubectl get csr` shows.
var tableConvertor = printers.Table[*certificates.CertificateSigningRequest]{
	Columns: []metav1.TableColumnDefinition{
		{Name: "Age", Type: "string", Description: "Time since the request was created."},
		{Name: "SignerName", Type: "string", Description: "The signer asked to sign the request."},
		{Name: "Requestor", Type: "string", Description: "The authenticated user who created the request."},
		{Name: "RequestedDuration", Type: "string", Description: "The requested certificate lifetime, if any."},
		{Name: "Condition", Type: "string", Description: "Pending, Approved, Denied, Failed, and Issued once a certificate is present."},
	},
	Row: func(csr *certificates.CertificateSigningRequest) []interface{} {
		requested := "<none>"
		if csr.Spec.ExpirationSeconds != nil {
			requested = duration.HumanDuration(time.Duration(*csr.Spec.ExpirationSeconds) * time.Second)
		}
		return []interface{}{printers.Age(csr.CreationTimestamp), csr.Spec.SignerName, csr.Spec.Username, requested, ConditionSummary(csr)}
	},
}

// ConditionSummary is the CONDITION column: the condition types in order,
// ",Issued" once a certificate is present, or "Pending".
func ConditionSummary(csr *certificates.CertificateSigningRequest) string {
	var parts []string
	for _, c := range csr.Status.Conditions {
		if c.Status == metav1.ConditionTrue || c.Status == "" {
			parts = append(parts, string(c.Type))
		}
	}
	if len(csr.Status.Certificate) > 0 {
		parts = append(parts, "Issued")
	}
	if len(parts) == 0 {
		return "Pending"
	}
	return strings.Join(parts, ",")
}
