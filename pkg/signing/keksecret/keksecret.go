// Package keksecret keeps the key-encryption key of CA keys stored in etcd
// in a Secret of the host cluster: rekey creates it, with a random key, the
// first time a replica starts and finds none, so that an install needs no
// hand-made key and every replica reads the same one.
package keksecret

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/klog/v2"

	"rekey.io/rekey/pkg/signing"
)

// DataKey is the Secret's key that holds the key-encryption key.
const DataKey = "kek"

// ManagedByLabel marks a Secret rekey created.
const ManagedByLabel = "app.kubernetes.io/managed-by"

// Ensure returns the key-encryption key in the Secret ref, creating the
// Secret with a fresh random key when it does not exist. Replicas that start
// together all end with the key of the one whose create won: a create that
// finds the Secret already there reads it instead. An existing Secret is
// never changed: a wrong or missing key is an error, because data encrypted
// with the old key would otherwise be lost (the etcd key store's check
// refuses a key that does not open what is stored).
func Ensure(ctx context.Context, secrets corev1client.SecretsGetter, ref types.NamespacedName) ([]byte, error) {
	logger := klog.FromContext(ctx)
	s, err := secrets.Secrets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		s, err = create(ctx, secrets, ref)
		switch {
		case err == nil:
			// The name only, never the value.
			logger.Info("Created the key-encryption key Secret; back it up with etcd", "secret", klog.KRef(ref.Namespace, ref.Name))
		case apierrors.IsAlreadyExists(err):
			s, err = secrets.Secrets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("key-encryption key Secret %s: %w", ref, err)
	}
	data, ok := s.Data[DataKey]
	if !ok {
		return nil, fmt.Errorf("key-encryption key Secret %s has no key %q", ref, DataKey)
	}
	kek, err := signing.ParseKEK(data, fmt.Sprintf("in Secret %s key %q", ref, DataKey))
	if err != nil {
		return nil, err
	}
	// A copy, so that the caller may clear it without touching the client's
	// objects.
	return append([]byte(nil), kek...), nil
}

func create(ctx context.Context, secrets corev1client.SecretsGetter, ref types.NamespacedName) (*corev1.Secret, error) {
	kek, err := signing.NewKEK()
	if err != nil {
		return nil, err
	}
	immutable := true
	return secrets.Secrets(ref.Namespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: ref.Name, Namespace: ref.Namespace,
			Labels: map[string]string{ManagedByLabel: "rekey"},
			Annotations: map[string]string{
				"rekey.io/description": "Key-encryption key of the CA keys rekey stores in etcd. Back it up with etcd: without it they cannot be read.",
			},
		},
		Type: corev1.SecretTypeOpaque,
		// Changing it would strand every key encrypted with it.
		Immutable: &immutable,
		Data:      map[string][]byte{DataKey: kek},
	}, metav1.CreateOptions{FieldManager: "rekey-apiserver"})
}
