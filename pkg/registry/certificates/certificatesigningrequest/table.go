package certificatesigningrequest

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"

	"rekey.io/rekey/pkg/apis/certificates"
)

// tableConvertor prints the columns `kubectl get csr` shows.
type tableConvertor struct{}

var columns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "Name of the request."},
	{Name: "Age", Type: "string", Description: "Time since the request was created."},
	{Name: "SignerName", Type: "string", Description: "The signer asked to sign the request."},
	{Name: "Requestor", Type: "string", Description: "The authenticated user who created the request."},
	{Name: "RequestedDuration", Type: "string", Description: "The requested certificate lifetime, if any."},
	{Name: "Condition", Type: "string", Description: "Pending, Approved, Denied, Failed, and Issued once a certificate is present."},
}

func (tableConvertor) ConvertToTable(ctx context.Context, obj runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	table := &metav1.Table{ColumnDefinitions: columns}
	if m, err := meta.ListAccessor(obj); err == nil {
		table.ResourceVersion = m.GetResourceVersion()
		table.Continue = m.GetContinue()
		table.RemainingItemCount = m.GetRemainingItemCount()
	} else if m, err := meta.CommonAccessor(obj); err == nil {
		table.ResourceVersion = m.GetResourceVersion()
	}
	var rows []metav1.TableRow
	switch t := obj.(type) {
	case *certificates.CertificateSigningRequest:
		rows = append(rows, row(t))
	case *certificates.CertificateSigningRequestList:
		rows = make([]metav1.TableRow, 0, len(t.Items))
		for i := range t.Items {
			rows = append(rows, row(&t.Items[i]))
		}
	default:
		return nil, fmt.Errorf("cannot print %T as a table", obj)
	}
	table.Rows = rows
	return table, nil
}

func row(csr *certificates.CertificateSigningRequest) metav1.TableRow {
	requested := "<none>"
	if csr.Spec.ExpirationSeconds != nil {
		requested = duration.HumanDuration(time.Duration(*csr.Spec.ExpirationSeconds) * time.Second)
	}
	return metav1.TableRow{
		Object: runtime.RawExtension{Object: csr},
		Cells: []interface{}{
			csr.Name,
			age(csr.CreationTimestamp),
			csr.Spec.SignerName,
			csr.Spec.Username,
			requested,
			ConditionSummary(csr),
		},
	}
}

func age(t metav1.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(time.Since(t.Time))
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
