package plugin

import (
	"bytes"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
)

// TestCredentialStatusSecret: status rcred/NAME names the Secret's keys,
// says why it cannot read a missing one, and on a server that serves no
// Secrets (standalone: no host cluster) says that rather than a 404.
func TestCredentialStatusSecret(t *testing.T) {
	rc := &rotationv1alpha1.RotatingCredential{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "team-a"},
		Spec: rotationv1alpha1.RotatingCredentialSpec{SecretRef: rotationv1alpha1.SecretReference{Name: "db-password"},
			RotationInterval: &metav1.Duration{Duration: time.Hour}, GracePeriod: &metav1.Duration{Duration: time.Minute}}}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db-password", Namespace: "team-a"}, Data: map[string][]byte{"password": []byte("x")}}
	coreV1 := []*metav1.APIResourceList{{GroupVersion: "v1", APIResources: []metav1.APIResource{{Name: "secrets", Namespaced: true, Kind: "Secret"}}}}
	for name, tc := range map[string]struct {
		objects   []runtime.Object
		resources []*metav1.APIResourceList
		want      string
	}{
		"the Secret": {[]runtime.Object{secret}, coreV1, "db-password, keys: password\n"},
		"no Secret":  {nil, coreV1, `db-password (cannot read: secrets "db-password" not found)`},
		"standalone": {nil, nil, "db-password (not shown: this server serves no Secrets; a standalone rekey-apiserver has no host cluster)\n"},
	} {
		t.Run(name, func(t *testing.T) {
			kube := kubefake.NewSimpleClientset(tc.objects...)
			kube.Discovery().(*fakediscovery.FakeDiscovery).Resources = tc.resources
			if tc.resources == nil {
				// As a standalone server answers: the resource is not served.
				kube.PrependReactor("get", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewGenericServerResponse(404, "get", schema.GroupResource{Resource: "secrets"}, "db-password", "", 0, true)
				})
			}
			client := fake.NewSimpleClientset(rc)
			var out bytes.Buffer
			cmd := newStatusCommand(func() (clientset.Interface, error) { return client, nil }, func() (kubernetes.Interface, error) { return kube, nil },
				func() (string, error) { return "team-a", nil }, genericiooptions.IOStreams{Out: &out, ErrOut: &out})
			cmd.SetArgs([]string{"rcred/db"})
			if err := cmd.Execute(); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), tc.want) {
				t.Fatalf("out lacks %q:\n%s", tc.want, out.String())
			}
		})
	}
}

// TestCredentialStatusWithoutDurations: status of a RotatingCredential
// without rotationInterval or gracePeriod (not defaulted: an object from
// elsewhere) prints them as unset instead of panicking.
func TestCredentialStatusWithoutDurations(t *testing.T) {
	rc := &rotationv1alpha1.RotatingCredential{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "team-a"},
		Spec: rotationv1alpha1.RotatingCredentialSpec{SecretRef: rotationv1alpha1.SecretReference{Name: "db-password"}}}
	kube := kubefake.NewSimpleClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db-password", Namespace: "team-a"}})
	client := fake.NewSimpleClientset(rc)
	var out bytes.Buffer
	cmd := newStatusCommand(func() (clientset.Interface, error) { return client, nil }, func() (kubernetes.Interface, error) { return kube, nil },
		func() (string, error) { return "team-a", nil }, genericiooptions.IOStreams{Out: &out, ErrOut: &out})
	cmd.SetArgs([]string{"rcred/db"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if want := "<unset> (grace period <unset>)"; !strings.Contains(out.String(), want) {
		t.Fatalf("out lacks %q:\n%s", want, out.String())
	}
}
