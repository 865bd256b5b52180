package credential

import (
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	"rekey.io/rekey/pkg/quietlog"
)

// ServiceAccountTokenMinter requests tokens bound to a Secret rekey makes
// per generation ("<name>-rekey-g<N>", type rekey.io/credential-binding,
// no data). Revoking deletes that Secret: kube-apiserver checks a bound
// token's object on every request and refuses the token once it is gone.
// A repeated mint finds the generation's binding Secret again and binds
// the new token to it, so revoking the generation revokes both.
type ServiceAccountTokenMinter struct {
	Kube kubernetes.Interface
}

// BindingSecretType is the type of the Secrets tokens are bound to.
const BindingSecretType corev1.SecretType = "rekey.io/credential-binding"

// BindingName is the binding Secret of a generation.
func BindingName(rc *rotationv1alpha1.RotatingCredential, generation int64) string {
	return fmt.Sprintf("%s-rekey-g%d", rc.Name, generation)
}

// Mint implements Minter.
func (m ServiceAccountTokenMinter) Mint(ctx context.Context, rc *rotationv1alpha1.RotatingCredential, generation int64) (map[string][]byte, error) {
	ctx = quietlog.Context(ctx) // carries a credential: never dump it (package quietlog)
	spec := rc.Spec.Minter.ServiceAccountToken
	if spec == nil {
		return nil, &MintError{Reason: "InvalidSpec", Err: fmt.Errorf("no serviceAccountToken block")}
	}
	secrets := m.Kube.CoreV1().Secrets(rc.Namespace)
	name := BindingName(rc, generation)
	binding, err := secrets.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelManagedBy: ManagedBy},
			Annotations: map[string]string{AnnotationOwner: string(rc.UID), AnnotationGeneration: fmt.Sprint(generation)}},
		Type: BindingSecretType,
	}, metav1.CreateOptions{FieldManager: fieldManager})
	if apierrors.IsAlreadyExists(err) {
		binding, err = secrets.Get(ctx, name, metav1.GetOptions{})
		if err == nil && (binding.Type != BindingSecretType || binding.Annotations[AnnotationOwner] != string(rc.UID)) {
			return nil, &MintError{Reason: "BindingConflict", Err: fmt.Errorf("the Secret %s/%s exists and is not this RotatingCredential's token binding", rc.Namespace, name)}
		}
	}
	if err != nil {
		return nil, &MintError{Reason: "BindingFailed", Err: fmt.Errorf("the token's binding Secret %s/%s: %w", rc.Namespace, name, err)}
	}
	expiration := spec.ExpirationSeconds
	if expiration == nil {
		seconds := int64((rc.Spec.RotationInterval.Duration + rc.Spec.GracePeriod.Duration + 10*time.Minute) / time.Second)
		expiration = &seconds
	}
	tr, err := m.Kube.CoreV1().ServiceAccounts(rc.Namespace).CreateToken(ctx, spec.ServiceAccountName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			Audiences: spec.Audiences, ExpirationSeconds: expiration,
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: binding.Name, UID: binding.UID},
		},
	}, metav1.CreateOptions{FieldManager: fieldManager})
	if err != nil {
		return nil, &MintError{Reason: "TokenRequestFailed", Err: fmt.Errorf("requesting a token for service account %s/%s: %w", rc.Namespace, spec.ServiceAccountName, err)}
	}
	return map[string][]byte{"token": []byte(tr.Status.Token)}, nil
}

// Revoke implements Minter.
func (m ServiceAccountTokenMinter) Revoke(ctx context.Context, rc *rotationv1alpha1.RotatingCredential, generation int64) error {
	ctx = quietlog.Context(ctx) // carries a credential: never dump it (package quietlog)
	name := BindingName(rc, generation)
	secrets := m.Kube.CoreV1().Secrets(rc.Namespace)
	existing, err := secrets.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return &MintError{Reason: "RevokeFailed", Err: fmt.Errorf("reading the token binding %s/%s: %w", rc.Namespace, name, err)}
	}
	if existing.Type != BindingSecretType || existing.Annotations[AnnotationOwner] != string(rc.UID) {
		return nil
	}
	uid := existing.UID
	err = secrets.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) {
		return &MintError{Reason: "RevokeFailed", Err: fmt.Errorf("deleting the token binding %s/%s: %w", rc.Namespace, name, err)}
	}
	return nil
}
