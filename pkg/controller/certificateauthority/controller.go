// Package certificateauthority is the CertificateAuthority controller: it
// makes each CA's key in the key store its spec names and the CA
// certificate, binds the CA to them (pkg/signing/cabinding; a File CA's key
// and certificate are its files, re-read every few seconds), and reports in
// status what the CA signs with, what to trust and whether it can sign.
// It walks a rotation one recorded step at a time (Preparing, then
// Completing), so that a process killed anywhere resumes, and while a CA
// is Prepared counts from the issuance records the certificates not yet
// renewed. Consumers load the keys through pkg/authority, the server's one
// CA-key service, whose cache this controller shares.
package certificateauthority

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"rekey.io/rekey/pkg/apis/message"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/authority"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	rotationinformers "rekey.io/rekey/pkg/generated/informers/externalversions/rotation/v1alpha1"
	rotationlisters "rekey.io/rekey/pkg/generated/listers/rotation/v1alpha1"
	"rekey.io/rekey/pkg/runner"
	"rekey.io/rekey/pkg/signing"
	"rekey.io/rekey/pkg/signing/cabinding"
	"rekey.io/rekey/pkg/trustpublish"
)

// fileRecheck is how often File CAs are re-read to publish a replaced CA.
const fileRecheck = 10 * time.Second

// Controller creates each CA's key and certificate and keeps its status.
type Controller struct {
	client      clientset.Interface
	lister      rotationlisters.CertificateAuthorityLister
	synced      cache.InformerSynced
	queue       workqueue.TypedRateLimitingInterface[string]
	authorities *authority.Authorities
	clock       clock.PassiveClock
	// records lists what each CA issued, to count who has not renewed
	// during a rotation.
	records Records
	// counts keeps each Prepared CA's last count of pending renewals, so
	// that the records are read again only when they changed.
	countsMu sync.Mutex
	counts   map[string]*pendingCount
	// events tells the host cluster about rotations (discarded without one).
	events record.EventRecorder
	// consumers indexes the TrustConsumers by CA (ConsumersByCA), and
	// published says what rekey's own publishers wrote: a rotation's new
	// key signs once both trust it (trustGate).
	consumers       cache.Indexer
	consumersSynced cache.InformerSynced
	published       *trustpublish.Tracker
	// lastWrite is when each CA's status was last written, to space the
	// writes whose only news is trust consumers' reports.
	lastWriteMu sync.Mutex
	lastWrite   map[string]time.Time
	// Revocations, when set, deletes the revocations of a key a rotation
	// destroyed, with its records (a revocation of a certificate no key
	// verifies any more protects nothing).
	Revocations interface {
		DeleteOfKey(ctx context.Context, caName, keyID string) (int, error)
	}
}

// Trust is what a rotation waits for before its new key signs.
type Trust struct {
	// Consumers is the informer on the TrustConsumers.
	Consumers rotationinformers.TrustConsumerInformer
	// Published holds the reports of rekey's own publishers; nil when
	// none runs (no host cluster).
	Published *trustpublish.Tracker
}

// NewController wires the controller to an informer.
// auth is the server's CA-key service (the same cache the issuer signs
// through, so that a key this controller rotates out is forgotten by every
// consumer); events records rotations where requesters see them.
// trust says what a rotation waits for before its new key signs.
func NewController(client clientset.Interface, informer rotationinformers.CertificateAuthorityInformer, trust Trust, auth *authority.Service, events record.EventRecorder, clk clock.PassiveClock) *Controller {
	RegisterMetrics()
	c := &Controller{
		client:      client,
		lister:      informer.Lister(),
		synced:      informer.Informer().HasSynced,
		queue:       runner.NewQueue[string]("certificateauthority"),
		authorities: auth.Authorities,
		records:     auth.Records,
		events:      events,
		clock:       clk,
		published:   trust.Published,
	}
	if trust.Consumers != nil {
		inf := trust.Consumers.Informer()
		// Added before the informer starts (the manager starts it after
		// building the controllers); an index that exists is kept.
		if _, ok := inf.GetIndexer().GetIndexers()[ConsumersByCA]; !ok {
			_ = inf.AddIndexers(cache.Indexers{ConsumersByCA: consumersByCA})
		}
		c.consumers, c.consumersSynced = inf.GetIndexer(), inf.HasSynced
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { c.enqueueConsumer(obj) },
			UpdateFunc: func(old, obj any) { c.enqueueConsumer(old, obj) },
			DeleteFunc: func(obj any) { c.enqueueConsumer(obj) },
		})
	}
	if trust.Published != nil {
		trust.Published.OnChange(func(name string) { c.queue.Add(name) })
	}
	_, _ = informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.enqueue(obj) },
		UpdateFunc: func(_, obj any) { c.enqueue(obj) },
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			c.enqueue(obj)
		},
	})
	return c
}

func (c *Controller) enqueue(obj any) {
	if ca, ok := obj.(*rotationv1alpha1.CertificateAuthority); ok {
		c.queue.Add(ca.Name)
	}
}

// Run processes CAs until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) {
	synced := []cache.InformerSynced{c.synced}
	if c.consumersSynced != nil {
		synced = append(synced, c.consumersSynced)
	}
	runner.Run(ctx, "certificateauthority", c.queue, synced, workers, c.sync)
	c.forgetAll()
}

// KeyIDFor is the key ID of a CA's first key. It is derived from the
// object's name and UID so that a restart after a crash finds the key made
// before the crash instead of making a second one, and so that a deleted
// and re-created CA of the same name gets a new key.
func KeyIDFor(ca *rotationv1alpha1.CertificateAuthority, generation int) string {
	uid := string(ca.UID)
	if len(uid) > 8 {
		uid = uid[:8]
	}
	return fmt.Sprintf("%s-%s-%d", ca.Name, uid, generation)
}

func (c *Controller) sync(ctx context.Context, name string) (time.Duration, error) {
	ca, err := c.lister.Get(name)
	if apierrors.IsNotFound(err) {
		forget(name)
		c.forgetCount(name)
		c.lastWriteMu.Lock()
		delete(c.lastWrite, name)
		c.lastWriteMu.Unlock()
		// The cache is the server's one: the issuer and the serving
		// certificate manager forget the deleted CA's key with it.
		c.authorities.Forget(name)
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	observe(ca)
	return c.Handle(ctx, ca)
}

// Handle binds a CA to its key (making key and certificate the first time)
// and publishes what it signs with and whether it can, in status. A CA
// that cannot sign, and every File CA, is looked at again after the
// returned duration.
func (c *Controller) Handle(ctx context.Context, ca *rotationv1alpha1.CertificateAuthority) (time.Duration, error) {
	name := ca.Name
	status := ca.Status.DeepCopy()
	recheck := time.Duration(0)
	switch ca.Spec.KeyStore.Type {
	case rotationv1alpha1.KeyStoreFile:
		recheck = fileRecheck
		auth, err := c.authorities.Get(ctx, name)
		if err != nil {
			c.notReady(status, "KeyStoreUnavailable", err.Error())
			break
		}
		if status.Current == nil || status.Current.Fingerprint != signing.Fingerprint(auth.Cert) {
			// The key is the file: no key ID to publish.
			status.Current = describe(auth.Cert, "")
			status.TrustBundle = status.Current.Certificate
		}
		c.ready(status)
	default:
		b, created, err := c.bind(ctx, ca)
		if err == nil && !created {
			// The key was made on an earlier sync (creating it just now
			// proved the store reachable): check it is still there.
			err = c.reachable(ctx, ca, b.KeyID)
		}
		var wait time.Duration
		if err == nil {
			b, wait, err = c.rotate(ctx, ca, b, status)
		}
		if err != nil {
			c.notReady(status, "KeyStoreUnavailable", err.Error())
			recheck = 10 * time.Second
			break
		}
		if err := publish(status, b); err != nil {
			return 0, fmt.Errorf("CertificateAuthority %s: %w", name, err)
		}
		if err := describeTokenKeys(ca, status); err != nil {
			return 0, fmt.Errorf("CertificateAuthority %s: %w", name, err)
		}
		if wait > 0 {
			recheck = wait
		}
		// A token key issues no certificates, so it has no records to
		// count: what a Prepared token key waits for is the previous
		// key's tokens to expire (status.previous.tokensExpireTime).
		if status.Phase == rotationv1alpha1.PhasePrepared && isTokenKey(ca) {
			status.PendingRenewal, status.PendingRenewals = 0, nil
		} else if status.Phase == rotationv1alpha1.PhasePrepared {
			if err := c.countPending(ctx, ca, b, status); err != nil {
				return 0, err
			}
			// Renewals keep coming: count again while the rotation waits.
			recheck = pendingRecount
		}
		c.ready(status)
	}
	c.publishCondition(ca, status)
	status.ObservedGeneration = ca.Generation
	if equality.Semantic.DeepEqual(status, &ca.Status) {
		return recheck, nil
	}
	if wait := c.spaceTrustWrites(name, &ca.Status, status); wait > 0 {
		return wait, nil
	}
	updated := ca.DeepCopy()
	updated.Status = *status
	if _, err := c.client.RotationV1alpha1().CertificateAuthorities().UpdateStatus(ctx, updated, metav1.UpdateOptions{FieldManager: "rekey-ca-controller"}); err != nil {
		return 0, fmt.Errorf("updating status: %w", err)
	}
	c.wroteAt(name)
	// Whoever depends on the CA (the signer controller) sees the update on
	// its CA informer.
	klog.FromContext(ctx).V(2).Info("Updated CertificateAuthority status", "name", name)
	return recheck, nil
}

// reachable checks that the key store still holds the key.
func (c *Controller) reachable(ctx context.Context, ca *rotationv1alpha1.CertificateAuthority, keyID string) error {
	store, err := c.authorities.Stores.For(ca.Spec.KeyStore)
	if err != nil {
		return err
	}
	_, err = store.Get(ctx, keyID)
	return err
}

// bind returns the CA's key binding, making the key (or, after a crash,
// finding it) and the self-signed certificate first if the CA has none.
// The key ID is derived from the object's name and UID, both set by the
// server; nothing in the object's spec or status chooses the key.
func (c *Controller) bind(ctx context.Context, ca *rotationv1alpha1.CertificateAuthority) (*cabinding.Binding, bool, error) {
	b, err := c.authorities.Bindings.Get(ctx, ca.Name)
	if err == nil && b.CAUID == string(ca.UID) {
		return b, false, nil
	}
	if err != nil && !errors.Is(err, cabinding.ErrNotFound) {
		return nil, false, err
	}
	store, err := c.authorities.Stores.For(ca.Spec.KeyStore)
	if err != nil {
		return nil, false, err
	}
	keyID := KeyIDFor(ca, 1)
	key, created, err := store.GetOrCreate(ctx, keyID, signing.Algorithm(ca.Spec.KeyAlgorithm))
	if err != nil {
		return nil, false, err
	}
	cert := adoptable(ca, keyID, key)
	if cert == nil {
		cert, err = signing.NewSelfSignedCA(ca.Spec.CommonName, key, ca.Spec.Validity.Duration, c.clock.Now())
		if err != nil {
			return nil, false, err
		}
	}
	b, err = c.authorities.Bindings.Create(ctx, &cabinding.Binding{CAName: ca.Name, CAUID: string(ca.UID), KeyID: keyID, Certificate: cert.Raw})
	if err != nil {
		return nil, false, err
	}
	klog.FromContext(ctx).Info("CA key bound", "name", ca.Name, "keyID", b.KeyID, "newKey", created, "fingerprint", signing.Fingerprint(cert))
	return b, true, nil
}

// adoptable returns the certificate a CA published before bindings
// existed, if it is the CA's own: published for the server-derived key ID,
// with that key, and self-signed by it (which only the key can do). Then
// upgrading keeps the CA certificate clients already trust.
func adoptable(ca *rotationv1alpha1.CertificateAuthority, keyID string, key crypto.Signer) *x509.Certificate {
	cur := ca.Status.Current
	if cur == nil || cur.KeyID != keyID {
		return nil
	}
	cert, err := authority.ParseCertificatePEM(cur.Certificate)
	if err != nil || !cert.IsCA || !signing.PublicKeysEqual(cert.PublicKey, key.Public()) || cert.CheckSignatureFrom(cert) != nil {
		return nil
	}
	return cert
}

func describe(cert *x509.Certificate, keyID string) *rotationv1alpha1.CACertificate {
	return &rotationv1alpha1.CACertificate{
		Certificate:  string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})),
		Fingerprint:  signing.Fingerprint(cert),
		SerialNumber: fmt.Sprintf("%x", cert.SerialNumber),
		NotBefore:    metav1.NewTime(cert.NotBefore),
		NotAfter:     metav1.NewTime(cert.NotAfter),
		KeyID:        keyID,
	}
}

func (c *Controller) ready(status *rotationv1alpha1.CertificateAuthorityStatus) {
	c.setCondition(status, metav1.Condition{Type: rotationv1alpha1.CertificateAuthorityReady, Status: metav1.ConditionTrue,
		Reason: "KeyAvailable", Message: "the CA key can be reached and the CA signs"})
}

func (c *Controller) notReady(status *rotationv1alpha1.CertificateAuthorityStatus, reason, message string) {
	c.setCondition(status, metav1.Condition{Type: rotationv1alpha1.CertificateAuthorityReady, Status: metav1.ConditionFalse, Reason: reason, Message: message})
}

// publishCondition says in status that spec.publish is not carried out on a
// server without a host cluster (no publisher runs: c.published is nil),
// rather than accepting it silently; otherwise there is no such condition.
func (c *Controller) publishCondition(ca *rotationv1alpha1.CertificateAuthority, status *rotationv1alpha1.CertificateAuthorityStatus) {
	p := ca.Spec.Publish
	if c.published != nil || p == nil || (p.ConfigMaps == nil && !p.ClusterTrustBundle) {
		apimeta.RemoveStatusCondition(&status.Conditions, rotationv1alpha1.CertificateAuthorityPublished)
		return
	}
	c.setCondition(status, metav1.Condition{Type: rotationv1alpha1.CertificateAuthorityPublished, Status: metav1.ConditionFalse,
		Reason: rotationv1alpha1.ReasonNoHostCluster, ObservedGeneration: ca.Generation,
		Message: "spec.publish is not carried out: rekey-apiserver runs without a host cluster (--kubeconfig) to publish into; read the bundle from status.trustBundle (kubectl rekey bundle)"})
}

// setCondition sets cond (its message capped) in status, leaving the
// condition, its transition time included, as it is when nothing but the
// time would change.
func (c *Controller) setCondition(status *rotationv1alpha1.CertificateAuthorityStatus, cond metav1.Condition) {
	// Validation refuses a longer message (key store errors are quoted).
	cond.Message = message.Cap(cond.Message)
	if cur := apimeta.FindStatusCondition(status.Conditions, cond.Type); cur != nil &&
		cur.Status == cond.Status && cur.Reason == cond.Reason && cur.Message == cond.Message && cur.ObservedGeneration == cond.ObservedGeneration {
		return
	}
	cond.LastTransitionTime = metav1.NewTime(c.clock.Now())
	apimeta.SetStatusCondition(&status.Conditions, cond)
}
