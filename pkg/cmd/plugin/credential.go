package plugin

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	rotationv1alpha1 "rekey.io/rekey/pkg/apis/rotation/v1alpha1"
	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
)

func credentialStatus(cmd *cobra.Command, newClient func() (clientset.Interface, error), newKube func() (kubernetes.Interface, error),
	namespace func() (string, error), out io.Writer, name string) error {
	ns, err := namespace()
	if err != nil {
		return err
	}
	client, err := newClient()
	if err != nil {
		return err
	}
	rc, err := client.RotationV1alpha1().RotatingCredentials(ns).Get(contextOf(cmd), name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("cannot read RotatingCredential %s/%s: %s", ns, name, statusMessage(err))
	}
	var secret *corev1.Secret
	secretErr := ""
	if kube, err := newKube(); err != nil {
		secretErr = "cannot read: " + err.Error()
	} else if secret, err = kube.CoreV1().Secrets(ns).Get(contextOf(cmd), rc.Spec.SecretRef.Name, metav1.GetOptions{}); err != nil {
		secret, secretErr = nil, "cannot read: "+statusMessage(err)
		if apierrors.IsNotFound(err) && !servesSecrets(kube) {
			// A 404 for the resource, not the Secret: a standalone
			// rekey-apiserver serves no core API, so "could not find
			// the requested resource" would read as a missing Secret.
			secretErr = "not shown: this server serves no Secrets; a standalone rekey-apiserver has no host cluster"
		}
	}
	printCredentialStatus(out, rc, secret, secretErr)
	return nil
}

// servesSecrets reports whether the server serves core v1 Secrets
// (discovery); when it cannot tell, it says yes, so that the Secret's own
// error is shown.
func servesSecrets(kube kubernetes.Interface) bool {
	list, err := kube.Discovery().ServerResourcesForGroupVersion("v1")
	if err != nil {
		return !apierrors.IsNotFound(err)
	}
	for _, r := range list.APIResources {
		if r.Name == "secrets" {
			return true
		}
	}
	return false
}

// printCredentialStatus shows a RotatingCredential and the names of its
// Secret's keys, never their values; secretErr, when the Secret is not
// shown, says why.
func printCredentialStatus(out io.Writer, rc *rotationv1alpha1.RotatingCredential, secret *corev1.Secret, secretErr string) {
	s := rc.Status
	when := func(t *metav1.Time) string {
		if t == nil {
			return "<none>"
		}
		return t.UTC().Format(time.RFC3339)
	}
	phase := string(s.Phase)
	if phase == "" {
		phase = "<never rotated>"
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "Name:\t%s/%s\n", rc.Namespace, rc.Name)
	fmt.Fprintf(w, "Minter:\t%s\n", rc.Spec.Minter.Type)
	fmt.Fprintf(w, "Interval:\t%s (grace period %s)\n", durationOrUnset(rc.Spec.RotationInterval), durationOrUnset(rc.Spec.GracePeriod))
	fmt.Fprintf(w, "Generation:\t%d\n", s.CredentialGeneration)
	fmt.Fprintf(w, "Minted:\t%s\n", when(s.MintTime))
	fmt.Fprintf(w, "Next rotation:\t%s\n", when(s.NextRotationTime))
	fmt.Fprintf(w, "Phase:\t%s\n", phase)
	if s.Phase == rotationv1alpha1.CredentialRotating {
		fmt.Fprintf(w, "Grace period ends:\t%s (the previous credential is revoked then)\n", when(s.GraceEndsTime))
	}
	switch {
	case secret != nil:
		keys := make([]string, 0, len(secret.Data))
		for k := range secret.Data {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		fmt.Fprintf(w, "Secret:\t%s, keys: %s\n", secret.Name, strings.Join(keys, ", "))
	case secretErr != "":
		fmt.Fprintf(w, "Secret:\t%s (%s)\n", rc.Spec.SecretRef.Name, secretErr)
	}
	for _, t := range []string{"Ready", "Degraded"} {
		if c := meta.FindStatusCondition(s.Conditions, t); c != nil {
			fmt.Fprintf(w, "%s:\t%s (%s) %s\n", t, c.Status, c.Reason, c.Message)
		}
	}
	_ = w.Flush()
}

// durationOrUnset prints an optional duration. The server defaults both
// of a RotatingCredential's, but an object from elsewhere (a file, an
// older server) may lack them, and status must not panic on it.
func durationOrUnset(d *metav1.Duration) string {
	if d == nil {
		return "<unset>"
	}
	return d.Duration.String()
}
