// Package printers turns rekey's objects into the tables kubectl prints.
package printers

import (
	"context"
	"crypto/x509"
	"fmt"
	"math/big"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
)

// Object is an API object with metadata.
type Object interface {
	runtime.Object
	metav1.Object
}

// Table prints objects of type T with the given columns; Row returns the
// cells after NAME. RowContext, when set, is used instead of Row, for
// cells that read other objects (with the request's context).
type Table[T Object] struct {
	Columns    []metav1.TableColumnDefinition
	Row        func(T) []interface{}
	RowContext func(context.Context, T) []interface{}
}

// ConvertToTable implements rest.TableConvertor.
func (t Table[T]) ConvertToTable(ctx context.Context, obj runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	table := &metav1.Table{ColumnDefinitions: append([]metav1.TableColumnDefinition{
		{Name: "Name", Type: "string", Format: "name", Description: "Name of the object."},
	}, t.Columns...)}
	if m, err := meta.ListAccessor(obj); err == nil {
		table.ResourceVersion, table.Continue, table.RemainingItemCount = m.GetResourceVersion(), m.GetContinue(), m.GetRemainingItemCount()
	} else if m, err := meta.CommonAccessor(obj); err == nil {
		table.ResourceVersion = m.GetResourceVersion()
	}
	var items []T
	if one, ok := obj.(T); ok {
		items = []T{one}
	} else if list, err := meta.ExtractList(obj); err == nil {
		for _, o := range list {
			item, ok := o.(T)
			if !ok {
				return nil, fmt.Errorf("cannot print %T as a table", o)
			}
			items = append(items, item)
		}
	} else {
		return nil, fmt.Errorf("cannot print %T as a table", obj)
	}
	for _, item := range items {
		var row []interface{}
		if t.RowContext != nil {
			row = t.RowContext(ctx, item)
		} else {
			row = t.Row(item)
		}
		cells := append([]interface{}{item.GetName()}, row...)
		table.Rows = append(table.Rows, metav1.TableRow{Cells: cells, Object: runtime.RawExtension{Object: item}})
	}
	return table, nil
}

// Age formats a creation time as kubectl does.
func Age(t metav1.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(time.Since(t.Time))
}

// NotAfter formats the end of a certificate's validity as rekey's tables
// do (kubectl get rca, revocations): RFC 3339 in UTC, "<none>" for none.
func NotAfter(t time.Time) string {
	if t.IsZero() {
		return "<none>"
	}
	return t.UTC().Format(time.RFC3339)
}

// ConditionStatus returns the status of a condition type, or "Unknown".
func ConditionStatus(conditions []metav1.Condition, t string) string {
	if c := meta.FindStatusCondition(conditions, t); c != nil {
		return string(c.Status)
	}
	return "Unknown"
}

// SerialHex is a certificate serial as lower-case hex of whole bytes, as
// openssl prints it: a serial whose first byte is below 0x10 keeps its
// leading zero, so the digits a user compares with openssl's output or
// pastes into `kubectl rekey revoke --serial` are the same. The server
// looks a serial up in any of these forms (issuance.NormalizeSerial).
func SerialHex(n *big.Int) string {
	s := n.Text(16)
	if len(s)%2 == 1 {
		s = "0" + s
	}
	return s
}

// IssuedSummary is what an Issued message names first about a
// certificate: its issuer, its serial (SerialHex) and its expiry. The
// rekey request's Issued condition and the events and conditions rekey
// writes on host-cluster CSRs say it the same way.
func IssuedSummary(c *x509.Certificate) string {
	return fmt.Sprintf("issued by %q, serial %s, valid until %s", c.Issuer.String(), SerialHex(c.SerialNumber), c.NotAfter.UTC().Format(time.RFC3339))
}

// SerialHexString is SerialHex of a serial already in hex (an issuance
// record keeps it without leading zeros); anything that is not hex is
// returned unchanged, to be shown as it is.
func SerialHexString(hex string) string {
	n, ok := new(big.Int).SetString(hex, 16)
	if !ok || n.Sign() < 0 || strings.HasPrefix(hex, "+") {
		return hex
	}
	return SerialHex(n)
}
