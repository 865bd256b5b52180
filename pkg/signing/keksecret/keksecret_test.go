package keksecret

import (
	"bytes"
	"context"
	"encoding/base64"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

var ref = types.NamespacedName{Namespace: "rekey-system", Name: "rekey-ca-kek"}

func secret(data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name}, Data: data}
}

func TestEnsureCreatesOnce(t *testing.T) {
	client := fake.NewClientset()
	first, err := Ensure(context.Background(), client.CoreV1(), ref)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 32 {
		t.Fatalf("key of %d bytes", len(first))
	}
	s, err := client.CoreV1().Secrets(ref.Namespace).Get(context.Background(), ref.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Immutable == nil || !*s.Immutable || s.Labels[ManagedByLabel] != "rekey" || !bytes.Equal(s.Data[DataKey], first) {
		t.Fatalf("created Secret %+v", s)
	}
	second, err := Ensure(context.Background(), client.CoreV1(), ref)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, second) {
		t.Fatal("a second start made another key")
	}
	creates := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "create" {
			creates++
		}
	}
	if creates != 1 {
		t.Fatalf("%d creates, want 1", creates)
	}
}

func TestEnsureReadsWhatOperatorProvided(t *testing.T) {
	kek := bytes.Repeat([]byte{7}, 32)
	for name, data := range map[string][]byte{
		"raw":    kek,
		"base64": []byte(base64.StdEncoding.EncodeToString(kek) + "\n"),
	} {
		t.Run(name, func(t *testing.T) {
			client := fake.NewClientset(secret(map[string][]byte{DataKey: data}))
			got, err := Ensure(context.Background(), client.CoreV1(), ref)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, kek) {
				t.Fatal("wrong key")
			}
		})
	}
}

// Two replicas starting together: the one whose create loses reads the
// winner's key instead of failing or making its own.
func TestEnsureLosesCreateRace(t *testing.T) {
	winner := bytes.Repeat([]byte{9}, 32)
	client := fake.NewClientset()
	client.PrependReactor("create", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		// The other replica's create lands first.
		if err := client.Tracker().Add(secret(map[string][]byte{DataKey: winner})); err != nil {
			t.Fatal(err)
		}
		return true, nil, apierrors.NewAlreadyExists(schema.GroupResource{Resource: "secrets"}, ref.Name)
	})
	got, err := Ensure(context.Background(), client.CoreV1(), ref)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, winner) {
		t.Fatal("did not take the winner's key")
	}
}

// A Secret that exists but does not hold a usable key is an error naming the
// Secret, never quoting its content, and is never replaced.
func TestEnsureRefusesBadSecret(t *testing.T) {
	for name, tc := range map[string]struct {
		data map[string][]byte
		want string
	}{
		"no key":    {data: map[string][]byte{"other": []byte("x")}, want: `has no key "kek"`},
		"too short": {data: map[string][]byte{DataKey: []byte("sekrit-value-123")}, want: "must hold 32 bytes"},
	} {
		t.Run(name, func(t *testing.T) {
			client := fake.NewClientset(secret(tc.data))
			_, err := Ensure(context.Background(), client.CoreV1(), ref)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), ref.String()) {
				t.Fatalf("error %v, want one naming %s and %q", err, ref, tc.want)
			}
			if strings.Contains(err.Error(), "sekrit") {
				t.Fatal("error quotes the Secret's content")
			}
			for _, a := range client.Actions() {
				if a.GetVerb() != "get" {
					t.Fatalf("unexpected %s", a.GetVerb())
				}
			}
		})
	}
}
