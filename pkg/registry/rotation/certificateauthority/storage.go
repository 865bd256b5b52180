package certificateauthority

import (
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/utils/clock"

	"rekey.io/rekey/pkg/apis/rotation"
	"rekey.io/rekey/pkg/registry"
	"rekey.io/rekey/pkg/registry/printers"
	"rekey.io/rekey/pkg/registry/rotation/rotate"
	"rekey.io/rekey/pkg/signing/keystorepaths"
)

// table prints what `kubectl get rca` shows.
var table = printers.Table[*rotation.CertificateAuthority]{
	Columns: []metav1.TableColumnDefinition{
		{Name: "KeyStore", Type: "string", Description: "Where the private key lives."},
		{Name: "Algorithm", Type: "string", Description: "Key algorithm."},
		{Name: "Phase", Type: "string", Description: "Rotation phase."},
		{Name: "Waiting", Type: "string", Description: "While Preparing: trust consumers not holding the new CA yet (status.trust.waiting); the old CA signs until none is left."},
		{Name: "Pending", Type: "integer", Description: "Valid certificates of the previous CA not renewed yet."},
		{Name: "NotAfter", Type: "string", Description: "End of the current CA certificate's validity."},
		{Name: "Fingerprint", Type: "string", Priority: 1, Description: "SHA-256 of the current CA certificate."},
		{Name: "Ready", Type: "string", Description: "Whether the CA can sign."},
		{Name: "Age", Type: "string", Description: "Time since creation."},
		{Name: "Purpose", Type: "string", Priority: 1, Description: "What the key signs: Certificates or ServiceAccountTokens (spec.purpose)."},
		{Name: "KID", Type: "string", Priority: 1, Description: "For a ServiceAccountTokens key: the kid of the tokens the current key signs (status.current.tokenKeyID)."},
	},
	Row: func(c *rotation.CertificateAuthority) []interface{} {
		notAfter, fingerprint := "<none>", "<none>"
		if cur := c.Status.Current; cur != nil {
			notAfter, fingerprint = cur.NotAfter.UTC().Format("2006-01-02T15:04:05Z"), cur.Fingerprint
		}
		phase := string(c.Status.Phase)
		if phase == "" {
			phase = "<none>"
		}
		// Only a Preparing rotation waits for consumers; a count kept from
		// the last one would read as a wait that is over.
		waiting := "<none>"
		if c.Status.Phase == rotation.PhasePreparing && c.Status.Trust != nil {
			waiting = strconv.Itoa(int(c.Status.Trust.Waiting))
		}
		purpose, kid := string(c.Spec.Purpose), "<none>"
		if purpose == "" {
			purpose = string(rotation.PurposeCertificates)
		}
		if cur := c.Status.Current; cur != nil && cur.TokenKeyID != "" {
			kid = cur.TokenKeyID
		}
		return []interface{}{string(c.Spec.KeyStore.Type), string(c.Spec.KeyAlgorithm), phase, waiting, int64(c.Status.PendingRenewal), notAfter, fingerprint,
			printers.ConditionStatus(c.Status.Conditions, rotation.CertificateAuthorityReady), printers.Age(c.CreationTimestamp), purpose, kid}
	},
}

// Storage holds the main resource and its subresources.
type Storage struct {
	CertificateAuthority *registry.REST
	Status               *registry.SubresourceREST
	Rotate               *rotate.REST
}

// NewStorage returns the main, /status and /rotate storage. A new CA may
// name only the PKCS#11 modules and key-store files the server allows.
func NewStorage(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, allowed keystorepaths.Allowed, clk clock.PassiveClock) (*Storage, error) {
	strategy := NewStrategy(scheme, allowed)
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &rotation.CertificateAuthority{} },
		NewListFunc:               func() runtime.Object { return &rotation.CertificateAuthorityList{} },
		DefaultQualifiedResource:  rotation.Resource("certificateauthorities"),
		SingularQualifiedResource: rotation.Resource("certificateauthority"),
		CreateStrategy:            strategy,
		UpdateStrategy:            strategy,
		DeleteStrategy:            strategy,
		ResetFieldsStrategy:       strategy,
		TableConvertor:            table,
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter}); err != nil {
		return nil, err
	}
	return &Storage{
		CertificateAuthority: registry.NewREST(store, "rca"),
		Status:               registry.NewSubresourceREST(store, NewStatusStrategy(strategy)),
		Rotate:               NewRotateREST(store, strategy, clk),
	}, nil
}
