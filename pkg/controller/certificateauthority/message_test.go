package certificateauthority

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"rekey.io/rekey/pkg/apis/message"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/apis/rotation/validation"
)

// TestMessagesAreCapped: the Ready condition and the events the CA
// controller writes stay within what validation (and events.k8s.io)
// accept, whatever error or text they quote.
func TestMessagesAreCapped(t *testing.T) {
	huge := strings.Repeat("é", 20000)
	var status rotationv1alpha1.CertificateAuthorityStatus
	events := record.NewFakeRecorder(1)
	c := &Controller{events: events, clock: clock.RealClock{}}
	c.notReady(&status, "KeyStoreUnavailable", huge)
	if errs := validation.ValidateConditions(field.NewPath("status", "conditions"), status.Conditions); len(errs) > 0 {
		t.Fatalf("the Ready condition fails validation: %v", errs)
	}
	c.event(&rotationv1alpha1.CertificateAuthority{}, "RotationStarted", "rotating %s", huge)
	if got := <-events.Events; len(got) > message.MaxEventLength+len("Normal RotationStarted ") {
		t.Fatalf("event of %d bytes", len(got))
	}
}
