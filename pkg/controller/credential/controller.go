// Package credential is the RotatingCredential controller: it keeps each
// RotatingCredential's Secret holding a current credential and walks the
// rotation one recorded step at a time (package steps.go), so that a crash
// anywhere resumes at the step that was not recorded.
package credential

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"rekey.io/rekey/pkg/apis/certificates/validation"
	condmsg "rekey.io/rekey/pkg/apis/message"
	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/authority"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	certinformers "rekey.io/rekey/pkg/generated/informers/externalversions/certificates/v1alpha1"
	rotationinformers "rekey.io/rekey/pkg/generated/informers/externalversions/rotation/v1alpha1"
	certlisters "rekey.io/rekey/pkg/generated/listers/certificates/v1alpha1"
	rotationlisters "rekey.io/rekey/pkg/generated/listers/rotation/v1alpha1"
	"rekey.io/rekey/pkg/runner"
)

const fieldManager = "rekey-credential-rotation"

// Conditions of a RotatingCredential.
const (
	ConditionReady    = "Ready"
	ConditionDegraded = "Degraded"
)

// Controller reconciles RotatingCredentials.
type Controller struct {
	client  clientset.Interface
	kube    kubernetes.Interface
	creds   rotationlisters.RotatingCredentialLister
	cas     rotationlisters.CertificateAuthorityLister
	signers certlisters.SignerLister
	synced  []cache.InformerSynced
	queue   workqueue.TypedRateLimitingInterface[string]
	clock   clock.Clock
	minters map[rotationv1alpha1.MinterType]Minter
	// calls runs minter calls off the workers, in lanes bounded per minter
	// type, operation and webhook endpoint (calls.go), so that a slow
	// minter holds at most its own lane, never a worker.
	calls *calls
	// callBackoff spaces the retries of failed minter calls (the queue's
	// own back-off is reset when a worker hands a key to a lane).
	callBackoff workqueue.TypedRateLimiter[string]
	// inline runs minter calls in the worker (unit tests of the steps).
	inline bool
	// secrets watches the Secrets rekey labelled, per namespace (secrets.go).
	secrets *secretWatches
	// afterStep is a test hook called after each step that wrote something.
	afterStep func(StepKind)
}

// NewController returns the controller; kube is nil without a host
// cluster (RotatingCredentials then report Degraded NoHostCluster).
func NewController(client clientset.Interface, kube kubernetes.Interface, creds rotationinformers.RotatingCredentialInformer,
	cas rotationinformers.CertificateAuthorityInformer, signers certinformers.SignerInformer, clk clock.Clock) *Controller {
	c := &Controller{
		client: client, kube: kube, creds: creds.Lister(), cas: cas.Lister(), signers: signers.Lister(), clock: clk,
		synced:      []cache.InformerSynced{creds.Informer().HasSynced, cas.Informer().HasSynced, signers.Informer().HasSynced},
		queue:       runner.NewQueue[string]("rotatingcredential"),
		minters:     map[rotationv1alpha1.MinterType]Minter{rotationv1alpha1.MinterRandom: RandomMinter{}, rotationv1alpha1.MinterWebhook: WebhookMinter{}, rotationv1alpha1.MinterClientCertificate: ClientCertificateMinter{Client: client}},
		callBackoff: newCallBackoff(),
	}
	c.calls = newCalls(c.queue.Add)
	if kube != nil {
		c.minters[rotationv1alpha1.MinterServiceAccountToken] = ServiceAccountTokenMinter{Kube: kube}
		c.secrets = newSecretWatches(kube, c.ownersOf, c.queue.Add)
	}
	c.afterStep = testHook()
	_, _ = creds.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.observeAndEnqueue,
		UpdateFunc: func(_, obj any) { c.observeAndEnqueue(obj) },
		DeleteFunc: func(obj any) {
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				forget(key)
				// The namespace's last RotatingCredential: stop watching
				// its Secrets.
				if ns, _, err := cache.SplitMetaNamespaceKey(key); err == nil {
					if left, err := c.creds.RotatingCredentials(ns).List(labels.Everything()); err == nil && len(left) == 0 {
						c.secrets.stop(ns)
					}
				}
			}
		},
	})
	// A CA rotation renews the ClientCertificates of its signers at once.
	_, _ = cas.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { c.enqueueClientCertificates() },
	})
	return c
}

// observeAndEnqueue sets a RotatingCredential's gauges from the object as
// stored, then queues it.
func (c *Controller) observeAndEnqueue(obj any) {
	if rc, ok := obj.(*rotationv1alpha1.RotatingCredential); ok {
		observe(rc)
	}
	c.enqueue(obj)
}

func (c *Controller) enqueue(obj any) {
	if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
		c.queue.Add(key)
	}
}

// ownersOf is the keys of the RotatingCredentials that name Secret
// ns/secret.
func (c *Controller) ownersOf(ns, secret string) []string {
	all, err := c.creds.RotatingCredentials(ns).List(labels.Everything())
	if err != nil {
		return nil
	}
	var keys []string
	for _, rc := range all {
		if rc.Spec.SecretRef.Name == secret {
			keys = append(keys, ns+"/"+rc.Name)
		}
	}
	return keys
}

func (c *Controller) enqueueClientCertificates() {
	all, err := c.creds.List(labels.Everything())
	if err != nil {
		return
	}
	for _, rc := range all {
		if rc.Spec.Minter.Type == rotationv1alpha1.MinterClientCertificate {
			c.enqueue(rc)
		}
	}
}

// Run runs workers until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) {
	runner.Run(ctx, "rotatingcredential", c.queue, c.synced, workers, c.sync)
	c.forgetAll()
}

// newCallBackoff: a failed minter call is retried after 1s, doubling to
// five minutes.
func newCallBackoff() workqueue.TypedRateLimiter[string] {
	return workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Second, 5*time.Minute)
}

func (c *Controller) sync(ctx context.Context, key string) (time.Duration, error) {
	// A lane slot handed to key and not taken by this sync goes on to the
	// next key waiting for it (calls.go).
	defer c.calls.settle(key)
	if c.calls.busy(key) {
		// Its minter call hands the key back when it ends.
		return 0, nil
	}
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return 0, nil
	}
	rc, err := c.creds.RotatingCredentials(ns).Get(name)
	if apierrors.IsNotFound(err) {
		forget(key)
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	rc = rc.DeepCopy()
	if c.kube == nil {
		return 0, c.degrade(ctx, rc, "NoHostCluster", "rekey-apiserver runs without a host cluster (--kubeconfig): there is no Secret to keep the credential in")
	}
	// A Secret deleted or edited by hand is seen at once from now on.
	c.secrets.ensure(ctx, ns)
	minter := c.minters[rc.Spec.Minter.Type]
	if minter == nil {
		return 0, c.degrade(ctx, rc, "UnknownMinter", fmt.Sprintf("minter type %q is not served", rc.Spec.Minter.Type))
	}
	secret, err := c.kube.CoreV1().Secrets(ns).Get(ctx, rc.Spec.SecretRef.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		secret = nil
	} else if err != nil {
		return 0, c.failed(ctx, rc, &MintError{Reason: "SecretUnreadable", Err: fmt.Errorf("reading Secret %s/%s: %w", ns, rc.Spec.SecretRef.Name, err)})
	}
	observeSecret(rc, secret)
	now := c.clock.Now()
	plan := Next(Observed{RC: rc, Secret: secret, Now: now, DueReason: c.caRotated(rc, secret)})
	switch plan.Step {
	case StepWait:
		setUntilRotation(rc, now)
		if err := c.clearDegraded(ctx, rc); err != nil {
			return 0, err
		}
		return max(plan.At.Sub(now), time.Millisecond), nil
	case StepRefuse:
		// The cache may not show yet the claim rekey recorded before it
		// created the Secret: the stored object decides.
		if current, err := c.cacheCurrent(ctx, rc); err != nil || !current {
			return 0, err
		}
		return 5 * time.Minute, c.degrade(ctx, rc, "SecretNotManaged", plan.Reason)
	case StepRecord:
		err = c.record(ctx, rc, secret)
	case StepCopyOld:
		err = c.copyOld(ctx, rc, secret)
	case StepMint, StepRevoke:
		if plan.FromStatus {
			// The Secret was read now, the status from the cache: a
			// revocation already recorded (phase Completed) but not cached
			// yet would be made again. The stored object decides.
			if current, err := c.cacheCurrent(ctx, rc); err != nil || !current {
				return 0, err
			}
		}
		if !c.inline {
			c.startCall(ctx, key, rc, secret, plan)
			return 0, nil
		}
		err = c.minterStep(ctx, rc, secret, plan)
	}
	return c.stepDone(ctx, rc, plan, err)
}

// cacheCurrent says whether rc, from the cache, is the stored object. When
// it is not, the informer event of the newer one brings the key back, and
// the step is decided from that.
func (c *Controller) cacheCurrent(ctx context.Context, rc *rotationv1alpha1.RotatingCredential) (bool, error) {
	stored, err := c.client.RotationV1alpha1().RotatingCredentials(rc.Namespace).Get(ctx, rc.Name, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	return stored.ResourceVersion == rc.ResourceVersion, nil
}

// stepDone reports a step's outcome: Degraded for a failed minter call or
// Secret write, the test hook after a success, and when to look again.
func (c *Controller) stepDone(ctx context.Context, rc *rotationv1alpha1.RotatingCredential, plan Plan, err error) (time.Duration, error) {
	if err != nil {
		var mintErr *MintError
		if errors.As(err, &mintErr) {
			return 0, c.failed(ctx, rc, mintErr)
		}
		return 0, err
	}
	klog.FromContext(ctx).V(2).Info("Step done", "rotatingCredential", rc.Namespace+"/"+rc.Name, "step", plan.Step,
		"generation", plan.Generation, "old", plan.Old, "reason", plan.Reason)
	if c.afterStep != nil {
		c.afterStep(plan.Step)
	}
	// The next step at once: each is decided from what is now stored.
	return time.Millisecond, nil
}

// minterStep is a step that calls the minter.
func (c *Controller) minterStep(ctx context.Context, rc *rotationv1alpha1.RotatingCredential, secret *corev1.Secret, plan Plan) error {
	if plan.Step == StepRevoke {
		return c.revoke(ctx, rc, secret, plan)
	}
	return c.mint(ctx, rc, secret, plan)
}

// startCall runs a minter step in its lane, off the worker, or leaves the
// key waiting for a slot of that lane (calls.go). The worker goes on with
// other keys either way.
func (c *Controller) startCall(ctx context.Context, key string, rc *rotationv1alpha1.RotatingCredential, secret *corev1.Secret, plan Plan) {
	lanes := laneOf(rc, plan.Step)
	logger := klog.FromContext(ctx).WithValues("rotatingCredential", key, "step", plan.Step, "lane", lanes[0].name)
	if !c.calls.start(key, lanes...) {
		logger.V(4).Info("Waiting for a slot of the minter's lane")
		return
	}
	go func() {
		_, err := c.stepDone(ctx, rc, plan, c.minterStep(ctx, rc, secret, plan))
		c.calls.finish(key)
		if err != nil {
			logger.Error(err, "Minter step failed; retrying")
			c.queue.AddAfter(key, c.callBackoff.When(key))
			return
		}
		c.callBackoff.Forget(key)
		c.queue.Add(key)
	}()
}

// caRotated says why a ClientCertificate is due now: its issuer is not the
// signer's current CA any more.
func (c *Controller) caRotated(rc *rotationv1alpha1.RotatingCredential, secret *corev1.Secret) string {
	spec := rc.Spec.Minter.ClientCertificate
	if spec == nil || secret == nil {
		return ""
	}
	signer, err := c.signers.Get(validation.SignerObjectName(spec.SignerName))
	if err != nil {
		return ""
	}
	ca, err := c.cas.Get(signer.Spec.CertificateAuthorityRef.Name)
	if err != nil || ca.Status.Current == nil {
		return ""
	}
	current, err := authority.ParseCertificatePEM(ca.Status.Current.Certificate)
	if err != nil {
		return ""
	}
	if IssuerRotated(secret.Data["tls.crt"], current) {
		return "the signer's CA rotated: the certificate is renewed under the new CA"
	}
	return ""
}

// mint makes generation plan.Generation and writes it into the Secret
// (created when missing) in one write, with plan.Old to revoke later.
func (c *Controller) mint(ctx context.Context, rc *rotationv1alpha1.RotatingCredential, secret *corev1.Secret, plan Plan) error {
	data, err := c.callMinter(ctx, rc, func(ctx context.Context, m Minter) (map[string][]byte, error) {
		return m.Mint(ctx, rc, plan.Generation)
	})
	if err != nil {
		return err
	}
	keys := slices.Sorted(maps.Keys(data))
	create := secret == nil
	if create {
		// The claim's hash goes into status before the create, so that a
		// Secret created but not recorded (a crash in between) is still
		// known as rekey's; nothing else a client can write proves it.
		claim, err := newClaim()
		if err != nil {
			return err
		}
		rc.Status.SecretClaim, rc.Status.SecretUID = ClaimHash(claim), ""
		updated, err := c.client.RotationV1alpha1().RotatingCredentials(rc.Namespace).UpdateStatus(ctx, rc, metav1.UpdateOptions{FieldManager: fieldManager})
		if err != nil {
			return fmt.Errorf("recording the claim on Secret %s/%s: %w", rc.Namespace, rc.Spec.SecretRef.Name, err)
		}
		// A failure below is reported on the object as now stored.
		*rc = *updated
		secret = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: rc.Spec.SecretRef.Name, Namespace: rc.Namespace,
			Annotations: map[string]string{AnnotationClaim: claim}}, Type: corev1.SecretTypeOpaque}
	} else {
		secret = secret.DeepCopy()
		// The previous current keys go unless they are being kept as .old.
		for _, k := range ReadSecret(secret).Keys {
			delete(secret.Data, k)
		}
	}
	if secret.Labels == nil {
		secret.Labels = map[string]string{}
	}
	if secret.Annotations == nil {
		secret.Annotations = map[string]string{}
	}
	if secret.Data == nil {
		secret.Data = map[string][]byte{}
	}
	maps.Copy(secret.Data, data)
	// To the second, as status keeps it.
	now := c.clock.Now().Truncate(time.Second)
	secret.Labels[LabelManagedBy] = ManagedBy
	a := secret.Annotations
	a[AnnotationOwner] = string(rc.UID)
	a[AnnotationGeneration] = strconv.FormatInt(plan.Generation, 10)
	a[AnnotationMintTime] = now.UTC().Format(time.RFC3339)
	a[AnnotationKeys] = strings.Join(keys, ",")
	a[AnnotationChecksum] = Checksum(secret.Data, keys)
	delete(a, AnnotationRotatingFrom)
	if plan.Old > 0 {
		a[AnnotationOldGeneration] = strconv.FormatInt(plan.Old, 10)
	} else {
		delete(a, AnnotationOldGeneration)
	}
	if err := c.writeSecret(ctx, rc, secret, create); err != nil {
		return err
	}
	rotations.WithLabelValues(string(rc.Spec.Minter.Type)).Inc()
	return nil
}

// copyOld keeps the current keys as "<key>.old": the first step of a
// rotation, recorded before anything is minted.
func (c *Controller) copyOld(ctx context.Context, rc *rotationv1alpha1.RotatingCredential, secret *corev1.Secret) error {
	secret = secret.DeepCopy()
	sec := ReadSecret(secret)
	for _, k := range sec.Keys {
		secret.Data[k+OldSuffix] = secret.Data[k]
	}
	secret.Annotations[AnnotationOldKeys] = strings.Join(sec.Keys, ",")
	secret.Annotations[AnnotationRotatingFrom] = strconv.FormatInt(sec.Generation, 10)
	return c.writeSecret(ctx, rc, secret, false)
}

// revoke revokes the previous generation, then removes its ".old" keys. A
// revocation that succeeded but whose Secret write failed is repeated: the
// minters tolerate that.
func (c *Controller) revoke(ctx context.Context, rc *rotationv1alpha1.RotatingCredential, secret *corev1.Secret, plan Plan) error {
	var old map[string][]byte
	if !plan.FromStatus {
		// The generation's values, which the Secret keeps for the grace
		// period: a certificate is revoked by its SHA-256.
		old = map[string][]byte{}
		for _, k := range ReadSecret(secret).OldKeys {
			old[k] = secret.Data[k+OldSuffix]
		}
	}
	if _, err := c.callMinter(ctx, rc, func(ctx context.Context, m Minter) (map[string][]byte, error) {
		if r, ok := m.(OldValuesRevoker); ok {
			return nil, r.RevokeWithOld(ctx, rc, plan.Old, old)
		}
		return nil, m.Revoke(ctx, rc, plan.Old)
	}); err != nil {
		return err
	}
	if plan.FromStatus {
		// The Secret does not name generation plan.Old any more (Next):
		// status records that it is revoked, so that the credential is
		// minted again next, with the current one to revoke.
		rc.Status.Phase, rc.Status.GraceEndsTime = rotationv1alpha1.CredentialCompleted, nil
		if err := c.updateStatus(ctx, rc); err != nil {
			return fmt.Errorf("recording the revocation of generation %d: %w", plan.Old, err)
		}
		return nil
	}
	secret = secret.DeepCopy()
	sec := ReadSecret(secret)
	for _, k := range sec.OldKeys {
		delete(secret.Data, k+OldSuffix)
	}
	delete(secret.Annotations, AnnotationOldKeys)
	delete(secret.Annotations, AnnotationOldGeneration)
	return c.writeSecret(ctx, rc, secret, false)
}

// writeSecret creates the Secret in the RotatingCredential's namespace, or
// updates it with the resourceVersion it was read at as the precondition:
// a Secret changed meanwhile fails the write, and the next reconcile
// decides again.
func (c *Controller) writeSecret(ctx context.Context, rc *rotationv1alpha1.RotatingCredential, secret *corev1.Secret, create bool) error {
	secrets := c.kube.CoreV1().Secrets(rc.Namespace)
	var err error
	if create {
		_, err = secrets.Create(ctx, secret, metav1.CreateOptions{FieldManager: fieldManager})
	} else {
		_, err = secrets.Update(ctx, secret, metav1.UpdateOptions{FieldManager: fieldManager})
	}
	if err != nil {
		return &MintError{Reason: "SecretWriteFailed", Err: fmt.Errorf("writing Secret %s/%s: %w", rc.Namespace, secret.Name, err)}
	}
	return nil
}

// callMinter runs one minter call (in its lane, see startCall), bounded to
// a minute whatever the minter does.
func (c *Controller) callMinter(ctx context.Context, rc *rotationv1alpha1.RotatingCredential, call func(context.Context, Minter) (map[string][]byte, error)) (map[string][]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return call(ctx, c.minters[rc.Spec.Minter.Type])
}

// record writes what the Secret holds into status.
func (c *Controller) record(ctx context.Context, rc *rotationv1alpha1.RotatingCredential, secret *corev1.Secret) error {
	sec := ReadSecret(secret)
	st := &rc.Status
	mint := metav1.NewTime(sec.MintTime)
	next := metav1.NewTime(sec.MintTime.Add(rc.Spec.RotationInterval.Duration))
	st.ObservedGeneration = rc.Generation
	st.CredentialGeneration = sec.Generation
	// From now on only this Secret is rekey's (CreatedByRekey).
	st.SecretUID, st.SecretClaim = secret.UID, ""
	st.MintTime, st.NextRotationTime = &mint, &next
	st.Phase = expectedPhase(sec)
	st.GraceEndsTime = nil
	if sec.OldGeneration > 0 {
		graceEnds := metav1.NewTime(sec.MintTime.Add(rc.Spec.GracePeriod.Duration))
		st.GraceEndsTime = &graceEnds
	}
	now := metav1.NewTime(c.clock.Now())
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionReady, Status: metav1.ConditionTrue, Reason: "Minted", ObservedGeneration: rc.Generation, LastTransitionTime: now,
		Message: condmsg.Cap(fmt.Sprintf("generation %d in Secret %s (keys %s)", sec.Generation, secret.Name, strings.Join(sec.Keys, ", ")))})
	setNotDegraded(rc, now)
	return c.updateStatus(ctx, rc)
}

// failed reports a failed step as Degraded (the current credential stays)
// and returns the error for a retry with back-off.
func (c *Controller) failed(ctx context.Context, rc *rotationv1alpha1.RotatingCredential, err *MintError) error {
	failures.WithLabelValues(string(rc.Spec.Minter.Type), err.Reason).Inc()
	if derr := c.degrade(ctx, rc, err.Reason, err.Error()); derr != nil {
		klog.FromContext(ctx).Error(derr, "Could not report Degraded", "rotatingCredential", rc.Namespace+"/"+rc.Name)
	}
	return err
}

func (c *Controller) degrade(ctx context.Context, rc *rotationv1alpha1.RotatingCredential, reason, message string) error {
	message = condmsg.Cap(message) // validation refuses a longer one, and webhook errors are quoted
	if cond := meta.FindStatusCondition(rc.Status.Conditions, ConditionDegraded); cond != nil && cond.Status == metav1.ConditionTrue && cond.Reason == reason && cond.Message == message {
		return nil
	}
	meta.SetStatusCondition(&rc.Status.Conditions, metav1.Condition{Type: ConditionDegraded, Status: metav1.ConditionTrue, Reason: reason, Message: message,
		ObservedGeneration: rc.Generation, LastTransitionTime: metav1.NewTime(c.clock.Now())})
	if meta.FindStatusCondition(rc.Status.Conditions, ConditionReady) == nil {
		meta.SetStatusCondition(&rc.Status.Conditions, metav1.Condition{Type: ConditionReady, Status: metav1.ConditionFalse, Reason: reason, Message: "no credential minted yet",
			ObservedGeneration: rc.Generation, LastTransitionTime: metav1.NewTime(c.clock.Now())})
	}
	return c.updateStatus(ctx, rc)
}

func (c *Controller) clearDegraded(ctx context.Context, rc *rotationv1alpha1.RotatingCredential) error {
	cond := meta.FindStatusCondition(rc.Status.Conditions, ConditionDegraded)
	if cond == nil || cond.Status == metav1.ConditionFalse {
		return nil
	}
	setNotDegraded(rc, metav1.NewTime(c.clock.Now()))
	return c.updateStatus(ctx, rc)
}

func setNotDegraded(rc *rotationv1alpha1.RotatingCredential, now metav1.Time) {
	meta.SetStatusCondition(&rc.Status.Conditions, metav1.Condition{Type: ConditionDegraded, Status: metav1.ConditionFalse, Reason: "AsExpected",
		ObservedGeneration: rc.Generation, LastTransitionTime: now})
}

func (c *Controller) updateStatus(ctx context.Context, rc *rotationv1alpha1.RotatingCredential) error {
	_, err := c.client.RotationV1alpha1().RotatingCredentials(rc.Namespace).UpdateStatus(ctx, rc, metav1.UpdateOptions{FieldManager: fieldManager})
	return err
}

// newClaim is a random value only the Secret rekey creates carries.
func newClaim() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("making a claim: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// validKey says what is wrong with a Secret key, or "".
func validKey(k string) string {
	if strings.HasSuffix(k, OldSuffix) {
		return "ends in " + OldSuffix + ", which rekey keeps for the previous credential"
	}
	return strings.Join(utilvalidation.IsConfigMapKey(k+OldSuffix), "; ")
}
