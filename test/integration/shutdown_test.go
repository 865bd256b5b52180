package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	clientset "rekey.io/rekey/pkg/generated/clientset/versioned"
	"rekey.io/rekey/test/framework"
)

// shutdownDeadline is how long a SIGTERMed server may take to exit: well
// inside the kubelet's default grace period of 30 s.
const shutdownDeadline = 20 * time.Second

// A SIGTERM with watches open (over HTTP/2 and HTTP/1.1, as controllers
// and kubectl hold them) ends the watches and the process by itself, with
// status 0, the embedded etcd closed; a restart on the same data directory
// finds every object written before.
func TestSIGTERMWithWatchesOpenExitsCleanly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	srv := framework.StartStandalone(t, dir)

	http1 := rest.CopyConfig(srv.Config)
	http1.NextProtos = []string{"http/1.1"}
	http1Client, err := clientset.NewForConfig(http1)
	if err != nil {
		t.Fatal(err)
	}
	var watches []watch.Interface
	for _, c := range []clientset.Interface{srv.Client, http1Client} {
		opts := metav1.ListOptions{TimeoutSeconds: ptr.To[int64](600)}
		for _, open := range []func() (watch.Interface, error){
			func() (watch.Interface, error) {
				return c.CertificatesV1alpha1().CertificateSigningRequests().Watch(ctx, opts)
			},
			func() (watch.Interface, error) { return c.RotationV1alpha1().CertificateAuthorities().Watch(ctx, opts) },
			func() (watch.Interface, error) { return c.AttestationV1alpha1().NodeAttestations().Watch(ctx, opts) },
		} {
			w, err := open()
			if err != nil {
				t.Fatalf("opening a watch: %v", err)
			}
			defer w.Stop()
			watches = append(watches, w)
		}
	}
	csrs := srv.Client.CertificatesV1alpha1().CertificateSigningRequests()
	var names []string
	for i := range 5 {
		name := fmt.Sprintf("before-sigterm-%d", i)
		if _, err := csrs.Create(ctx, newCSR(t, name, "example.com/signer"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	// The watches are live: each CSR watch sees the last write.
	for _, w := range []watch.Interface{watches[0], watches[3]} {
		waitForEvent(t, w, names[len(names)-1])
	}

	start := time.Now()
	if err := srv.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !srv.WaitExit(shutdownDeadline) {
		t.Fatalf("rekey-apiserver had not exited %s after SIGTERM with %d watches open", shutdownDeadline, len(watches))
	}
	t.Logf("exited %s after SIGTERM with %d watches open (measured, not asserted)", time.Since(start).Round(time.Millisecond), len(watches))
	if code := srv.ExitCode(); code != 0 {
		t.Fatalf("rekey-apiserver exited with status %d after SIGTERM, want 0\n%s", code, srv.LogTail(8000))
	}
	log := srv.Log()
	for _, want := range []string{"Controllers stopped", "Embedded etcd closed"} {
		if !strings.Contains(log, want) {
			t.Errorf("the log does not say %q:\n%s", want, srv.LogTail(8000))
		}
	}
	for i, w := range watches {
		if err := framework.EventuallyErr(5*time.Second, func(context.Context) error { return ended(w) }); err != nil {
			t.Errorf("watch %d not ended by the server's exit: %v", i, err)
		}
	}

	again := framework.StartStandalone(t, dir)
	list, err := again.Client.CertificatesV1alpha1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, csr := range list.Items {
		found[csr.Name] = true
	}
	for _, name := range names {
		if !found[name] {
			t.Errorf("%s, written before SIGTERM, is gone after the restart", name)
		}
	}
}

// waitForEvent reads w until an event for the object named name.
func waitForEvent(t *testing.T, w watch.Interface, name string) {
	t.Helper()
	framework.Eventually(t, 30*time.Second, "a watch event for "+name, func(context.Context) error {
		for {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					return framework.Permanent(errors.New("the watch closed first"))
				}
				if m, err := metaName(ev.Object); err == nil && m == name {
					return nil
				}
			default:
				return errors.New("not seen yet")
			}
		}
	})
}

func metaName(obj any) (string, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return "", fmt.Errorf("%T has no metadata", obj)
	}
	return m.GetName(), nil
}

// ended reads whatever events remain on w and says whether its channel
// is closed.
func ended(w watch.Interface) error {
	for {
		select {
		case _, open := <-w.ResultChan():
			if !open {
				return nil
			}
		default:
			return errors.New("still open")
		}
	}
}
