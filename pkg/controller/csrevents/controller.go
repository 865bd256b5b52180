// Package csrevents records, in the host cluster, an event on a request
// each time it gets a decision: Approved, Denied, Failed (the rule it
// broke in the message) and Issued (the certificate's issuer, serial and
// expiry). The events follow the request's conditions, which every path
// writes (a create or an approval decided in the write, the controllers,
// a person, a signer outside rekey), so one watch on the leader sees them
// all; `kubectl describe` and `kubectl rekey inspect` show them.
package csrevents

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/apis/message"
)

// Reasons of the events, one per condition type.
const (
	ReasonApproved = string(certv1alpha1.CertificateApproved)
	ReasonDenied   = string(certv1alpha1.CertificateDenied)
	ReasonFailed   = string(certv1alpha1.CertificateFailed)
	ReasonIssued   = string(certv1alpha1.CertificateIssued)
)

// recorded are the condition types that become events, in the order a
// request gets them, with the event type of each.
var recorded = []struct {
	condition certv1alpha1.RequestConditionType
	eventType string
}{
	{certv1alpha1.CertificateApproved, corev1.EventTypeNormal},
	{certv1alpha1.CertificateDenied, corev1.EventTypeWarning},
	{certv1alpha1.CertificateFailed, corev1.EventTypeWarning},
	{certv1alpha1.CertificateIssued, corev1.EventTypeNormal},
}

// Handler turns condition changes seen on a request informer into events.
type Handler struct {
	Events record.EventRecorder
}

// Register adds the handler to a request informer.
func (h Handler) Register(informer cache.SharedIndexInformer) error {
	_, err := informer.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, isInInitialList bool) {
			// Requests already there when the leader starts were
			// recorded by the leader that saw them change (or happened
			// while none ran): recording them again would repeat
			// every decision at each failover.
			if csr, ok := obj.(*certv1alpha1.CertificateSigningRequest); ok && !isInInitialList {
				h.record(nil, csr)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			old, okOld := oldObj.(*certv1alpha1.CertificateSigningRequest)
			cur, okNew := newObj.(*certv1alpha1.CertificateSigningRequest)
			if okOld && okNew {
				h.record(old, cur)
			}
		},
	})
	return err
}

// record emits an event for each recorded condition cur has and old had
// not.
func (h Handler) record(old, cur *certv1alpha1.CertificateSigningRequest) {
	for _, r := range recorded {
		c := certv1alpha1.GetCondition(cur, r.condition)
		if c == nil || (old != nil && certv1alpha1.GetCondition(old, r.condition) != nil) {
			continue
		}
		h.Events.Event(cur, r.eventType, string(r.condition), message.CapEvent(eventMessage(c)))
	}
}

// eventMessage says the condition's reason and message: for Failed, the
// rule the request broke.
func eventMessage(c *certv1alpha1.CertificateSigningRequestCondition) string {
	switch {
	case c.Message == "":
		return c.Reason
	case c.Reason == "":
		return c.Message
	}
	return fmt.Sprintf("%s: %s", c.Reason, c.Message)
}

// Trim keeps of a request what the events need (its identity for the
// event's object reference, and its conditions), so that the informer
// that watches every request holds little of each: not the request, not
// the certificate, not the managed fields.
func Trim(obj any) (any, error) {
	csr, ok := obj.(*certv1alpha1.CertificateSigningRequest)
	if !ok {
		return obj, nil
	}
	return &certv1alpha1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: csr.Name, UID: csr.UID, ResourceVersion: csr.ResourceVersion, CreationTimestamp: csr.CreationTimestamp},
		Spec:       certv1alpha1.CertificateSigningRequestSpec{SignerName: csr.Spec.SignerName},
		Status:     certv1alpha1.CertificateSigningRequestStatus{Conditions: csr.Status.Conditions},
	}, nil
}
