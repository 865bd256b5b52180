// Package trustconsumer stores TrustConsumers: the main resource names the
// CAs a consumer verifies with and, set by the server, the user that
// registered it (spec.reporter); /status is that user's report of what it
// holds, each entry stamped with the server's time when it changes. Who
// may write what is the TrustConsumer admission plugin's; this package
// keeps the fields the server owns out of clients' hands.
package trustconsumer

import (
	"context"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/storage/names"
	"k8s.io/utils/clock"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"rekey.io/rekey/pkg/apis/rotation"
	"rekey.io/rekey/pkg/apis/rotation/validation"
	"rekey.io/rekey/pkg/registry"
)

const apiVersion = "rotation.rekey.io/v1alpha1"

type strategy struct {
	runtime.ObjectTyper
	names.NameGenerator
}

// NewStrategy returns the main resource's strategy.
func NewStrategy(typer runtime.ObjectTyper) strategy {
	return strategy{ObjectTyper: typer, NameGenerator: names.SimpleNameGenerator}
}

func (strategy) NamespaceScoped() bool { return false }

// GetResetFields: status is the reporter's, through /status.
func (strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{apiVersion: fieldpath.NewSet(fieldpath.MakePathOrDie("status"))}
}

// PrepareForCreate records who registers the consumer, whatever the client
// sent: that user alone may report for it, so a client naming another
// reporter would hand its consumer to someone else. Status starts empty:
// a consumer holds nothing until it reports.
func (strategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	tc := obj.(*rotation.TrustConsumer)
	tc.Spec.Reporter = ""
	if u, ok := genericapirequest.UserFrom(ctx); ok && u != nil {
		tc.Spec.Reporter = u.GetName()
	}
	tc.Status = rotation.TrustConsumerStatus{}
	tc.Generation = 1
}

// PrepareForUpdate keeps the reporter and status (a spec update sent with
// an older copy of status must not undo a report). A CA dropped from spec
// takes its report with it: a report on a CA the consumer no longer names
// would be counted by nothing and refused by validation.
func (strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	tc, prev := obj.(*rotation.TrustConsumer), old.(*rotation.TrustConsumer)
	tc.Spec.Reporter = prev.Spec.Reporter
	tc.Status = *prev.Status.DeepCopy()
	tc.Status.Holds = slices.DeleteFunc(tc.Status.Holds, func(h rotation.TrustHeld) bool {
		return !slices.Contains(tc.Spec.CertificateAuthorities, h.CertificateAuthority)
	})
	tc.Generation = prev.Generation
	if !slices.Equal(tc.Spec.CertificateAuthorities, prev.Spec.CertificateAuthorities) {
		tc.Generation++
	}
}

func (strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateTrustConsumer(obj.(*rotation.TrustConsumer))
}

func (strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateTrustConsumerUpdate(obj.(*rotation.TrustConsumer), old.(*rotation.TrustConsumer))
}

func (strategy) WarningsOnCreate(context.Context, runtime.Object) []string { return nil }
func (strategy) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string {
	return nil
}
func (strategy) Canonicalize(runtime.Object)                   {}
func (strategy) AllowCreateOnUpdate(context.Context) bool      { return false }
func (strategy) AllowUnconditionalUpdate(context.Context) bool { return true }

// statusStrategy serves /status: the reporter's report.
type statusStrategy struct {
	strategy
	clock clock.PassiveClock
}

// NewStatusStrategy returns the /status strategy; clk stamps reports.
func NewStatusStrategy(base strategy, clk clock.PassiveClock) statusStrategy {
	return statusStrategy{strategy: base, clock: clk}
}

// GetResetFields: spec is not /status's.
func (statusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{apiVersion: fieldpath.NewSet(fieldpath.MakePathOrDie("spec"))}
}

// PrepareForUpdate keeps spec and metadata, and stamps each entry whose
// fingerprints are new or changed with the server's time: reportTime says
// when rekey learnt that the consumer holds what it holds, which a client
// clock must not backdate. An entry that did not change keeps its time,
// so a consumer repeating its report does not look newer than it is.
func (s statusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	tc, prev := obj.(*rotation.TrustConsumer), old.(*rotation.TrustConsumer)
	tc.Spec = prev.Spec
	registry.KeepMetadata(tc, prev)
	before := map[string]rotation.TrustHeld{}
	for _, h := range prev.Status.Holds {
		before[h.CertificateAuthority] = h
	}
	now := metav1.NewTime(s.clock.Now().Truncate(time.Second)) // stored to the second
	for i := range tc.Status.Holds {
		h := &tc.Status.Holds[i]
		if was, ok := before[h.CertificateAuthority]; ok && sameFingerprints(was.Fingerprints, h.Fingerprints) && was.ReportTime != nil {
			h.ReportTime = was.ReportTime.DeepCopy()
			continue
		}
		t := now
		h.ReportTime = &t
	}
}

// sameFingerprints compares two fingerprint sets whatever their order.
func sameFingerprints(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// ValidateUpdate checks the report against the stored spec. Whether the
// writer is the reporter is the admission plugin's check (it runs for
// update and patch alike).
func (statusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateTrustConsumerStatusUpdate(obj.(*rotation.TrustConsumer), old.(*rotation.TrustConsumer))
}
