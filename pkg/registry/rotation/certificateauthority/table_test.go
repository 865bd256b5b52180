package certificateauthority

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"rekey.io/rekey/pkg/apis/rotation"
)

// TestTableWaiting: the WAITING column counts the trust consumers a
// Preparing rotation waits for, and is empty in every other phase (a
// count kept from the last rotation is no wait).
func TestTableWaiting(t *testing.T) {
	preparing := newCA()
	preparing.Status.Phase = rotation.PhasePreparing
	preparing.Status.Trust = &rotation.TrustStatus{Consumers: 5, Waiting: 2}
	justStarted := newCA()
	justStarted.Status.Phase = rotation.PhasePreparing
	prepared := newCA()
	prepared.Status.Phase, prepared.Status.PendingRenewal = rotation.PhasePrepared, 3
	prepared.Status.Trust = &rotation.TrustStatus{Consumers: 5, Waiting: 1, OverriddenTime: &metav1.Time{}}
	list := &rotation.CertificateAuthorityList{Items: []rotation.CertificateAuthority{*preparing, *justStarted, *prepared, *newCA()}}

	tbl, err := table.ConvertToTable(context.Background(), list, nil)
	if err != nil {
		t.Fatal(err)
	}
	col := map[string]int{}
	for i, c := range tbl.ColumnDefinitions {
		col[c.Name] = i
	}
	for _, name := range []string{"Name", "KeyStore", "Algorithm", "Phase", "Waiting", "Pending", "NotAfter", "Fingerprint", "Ready", "Age"} {
		if _, ok := col[name]; !ok {
			t.Fatalf("no column %s in %v", name, tbl.ColumnDefinitions)
		}
	}
	if col["Waiting"] != col["Phase"]+1 {
		t.Errorf("WAITING is column %d, want after PHASE (%d)", col["Waiting"], col["Phase"])
	}
	for i, want := range []struct {
		phase, waiting string
		pending        int64
	}{{"Preparing", "2", 0}, {"Preparing", "<none>", 0}, {"Prepared", "<none>", 3}, {"<none>", "<none>", 0}} {
		cells := tbl.Rows[i].Cells
		if len(cells) != len(tbl.ColumnDefinitions) || cells[col["Phase"]] != want.phase || cells[col["Waiting"]] != want.waiting || cells[col["Pending"]] != want.pending {
			t.Errorf("row %d: %v, want phase %s waiting %s pending %d", i, cells, want.phase, want.waiting, want.pending)
		}
	}
}

// TestTablePurposeAndKID: -o wide adds PURPOSE and, for a token key, the
// kid its current key signs with; the default columns stay as they were.
func TestTablePurposeAndKID(t *testing.T) {
	tokens := newCA()
	tokens.Spec.Purpose = rotation.PurposeServiceAccountTokens
	tokens.Status.Current = &rotation.CACertificate{Fingerprint: "SHA256:ab", TokenKeyID: "kid-1"}
	list := &rotation.CertificateAuthorityList{Items: []rotation.CertificateAuthority{*newCA(), *tokens}}
	tbl, err := table.ConvertToTable(context.Background(), list, nil)
	if err != nil {
		t.Fatal(err)
	}
	var defaults []string
	col := map[string]int{}
	for i, c := range tbl.ColumnDefinitions {
		col[c.Name] = i
		if c.Priority == 0 {
			defaults = append(defaults, c.Name)
		}
	}
	if got, want := strings.Join(defaults, " "), "Name KeyStore Algorithm Phase Waiting Pending NotAfter Ready Age"; got != want {
		t.Errorf("default columns %s, want %s", got, want)
	}
	for _, name := range []string{"Purpose", "KID"} {
		if i, ok := col[name]; !ok || tbl.ColumnDefinitions[i].Priority != 1 {
			t.Fatalf("column %s missing or not wide-only: %v", name, tbl.ColumnDefinitions)
		}
	}
	for i, want := range [][2]string{{"Certificates", "<none>"}, {"ServiceAccountTokens", "kid-1"}} {
		cells := tbl.Rows[i].Cells
		if len(cells) != len(tbl.ColumnDefinitions) || cells[col["Purpose"]] != want[0] || cells[col["KID"]] != want[1] {
			t.Errorf("row %d: %v, want purpose %s kid %s", i, cells, want[0], want[1])
		}
	}
}
