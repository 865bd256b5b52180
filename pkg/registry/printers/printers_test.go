package printers

import (
	"context"
	"math/big"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rekey.io/rekey/pkg/apis/rotation"
)

func TestTable(t *testing.T) {
	table := Table[*rotation.CertificateAuthority]{
		Columns: []metav1.TableColumnDefinition{{Name: "Ready", Type: "string"}},
		Row: func(c *rotation.CertificateAuthority) []interface{} {
			return []interface{}{ConditionStatus(c.Status.Conditions, "Ready")}
		},
	}
	ready := rotation.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "a"},
		Status: rotation.CertificateAuthorityStatus{Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue}}}}
	list := &rotation.CertificateAuthorityList{ListMeta: metav1.ListMeta{ResourceVersion: "5"},
		Items: []rotation.CertificateAuthority{ready, {ObjectMeta: metav1.ObjectMeta{Name: "b"}}}}
	got, err := table.ConvertToTable(context.Background(), list, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.ColumnDefinitions) != 2 || got.ColumnDefinitions[0].Name != "Name" || got.ResourceVersion != "5" || len(got.Rows) != 2 {
		t.Fatalf("table %+v", got)
	}
	if got.Rows[0].Cells[0] != "a" || got.Rows[0].Cells[1] != "True" || got.Rows[1].Cells[1] != "Unknown" {
		t.Fatalf("rows %+v", got.Rows)
	}
	one, err := table.ConvertToTable(context.Background(), &ready, nil)
	if err != nil || len(one.Rows) != 1 {
		t.Fatalf("single object: %v %+v", err, one)
	}
	if _, err := table.ConvertToTable(context.Background(), &metav1.Status{}, nil); err == nil {
		t.Fatal("a Status was printed as a CA table")
	}
}

func TestAge(t *testing.T) {
	if got := Age(metav1.Time{}); got != "<unknown>" {
		t.Errorf("zero time: %q", got)
	}
	if got := Age(metav1.NewTime(time.Now().Add(-90 * time.Minute))); got != "90m" {
		t.Errorf("90 minutes ago: %q", got)
	}
}

func TestNotAfter(t *testing.T) {
	if got := NotAfter(time.Time{}); got != "<none>" {
		t.Errorf("zero time: %q", got)
	}
	at := time.Date(2026, 11, 24, 21, 0, 0, 0, time.FixedZone("CET", 3600))
	if got := NotAfter(at); got != "2026-11-24T20:00:00Z" {
		t.Errorf("NotAfter(%v) = %q, want RFC 3339 in UTC", at, got)
	}
}

// TestRowContext: a table with RowContext prints its cells, with the
// request's context.
func TestRowContext(t *testing.T) {
	type key struct{}
	table := Table[*rotation.CertificateAuthority]{
		Columns: []metav1.TableColumnDefinition{{Name: "From", Type: "string"}},
		RowContext: func(ctx context.Context, c *rotation.CertificateAuthority) []interface{} {
			return []interface{}{ctx.Value(key{})}
		},
	}
	got, err := table.ConvertToTable(context.WithValue(context.Background(), key{}, "ctx"), &rotation.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, nil)
	if err != nil || len(got.Rows) != 1 || got.Rows[0].Cells[1] != "ctx" {
		t.Fatalf("table %+v, err %v", got, err)
	}
}

// Serials print as whole bytes, as openssl does: a serial whose first byte
// is below 0x10 keeps its leading zero.
func TestSerialHex(t *testing.T) {
	for in, want := range map[string]string{
		"df83cfb0b4403c0646bbb86c295bb24": "0df83cfb0b4403c0646bbb86c295bb24",
		"1f":                              "1f",
		"f":                               "0f",
		"0":                               "00",
	} {
		n, ok := new(big.Int).SetString(in, 16)
		if !ok {
			t.Fatalf("bad fixture %q", in)
		}
		if got := SerialHex(n); got != want {
			t.Errorf("SerialHex(%s) = %q, want %q", in, got, want)
		}
		if got := SerialHexString(in); got != want {
			t.Errorf("SerialHexString(%q) = %q, want %q", in, got, want)
		}
	}
	if got := SerialHexString("not hex"); got != "not hex" {
		t.Errorf("SerialHexString of a non-hex string = %q, want it unchanged", got)
	}
}
