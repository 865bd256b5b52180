package csrwait

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"

	certv1alpha1 "rekey.io/rekey/pkg/apis/certificates/v1alpha1"
	"rekey.io/rekey/pkg/generated/clientset/versioned/fake"
)

const name = "node-csr-abc"

var (
	certPEM = []byte("-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n")
	csrs    = certv1alpha1.SchemeGroupVersion.WithResource("certificatesigningrequests")
)

func request(name string, uid types.UID) *certv1alpha1.CertificateSigningRequest {
	return &certv1alpha1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: name, UID: uid}}
}

func withCondition(csr *certv1alpha1.CertificateSigningRequest, t certv1alpha1.RequestConditionType, status metav1.ConditionStatus) *certv1alpha1.CertificateSigningRequest {
	csr = csr.DeepCopy()
	csr.Status.Conditions = append(csr.Status.Conditions, certv1alpha1.CertificateSigningRequestCondition{
		Type: t, Status: status, Reason: "Because" + string(t), Message: "the " + string(t) + " message",
	})
	return csr
}

func withCertificate(csr *certv1alpha1.CertificateSigningRequest) *certv1alpha1.CertificateSigningRequest {
	csr = csr.DeepCopy()
	csr.Status.Certificate = certPEM
	return csr
}

// waitOn starts WaitForCertificate for (name, "uid-1") on a fake
// clientset holding objects, and returns the client once the wait's first
// watch is open (so that every later change reaches it as an event), and
// the channel its result arrives on. With lagging, lists (a watch cache
// behind the caller's create) show none of objects, a Get does, and the
// client is returned once the wait has also read the request with a Get.
func waitOn(t *testing.T, ctx context.Context, lagging bool, objects ...*certv1alpha1.CertificateSigningRequest) (*fake.Clientset, <-chan error, func() []byte) {
	t.Helper()
	client := fake.NewSimpleClientset()
	for _, o := range objects {
		if err := client.Tracker().Add(o); err != nil {
			t.Fatal(err)
		}
	}
	got := make(chan struct{}, 10)
	if lagging {
		client.PrependReactor("list", "certificatesigningrequests", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, &certv1alpha1.CertificateSigningRequestList{}, nil
		})
		client.PrependReactor("get", "certificatesigningrequests", func(k8stesting.Action) (bool, runtime.Object, error) {
			got <- struct{}{}
			return false, nil, nil // the tracker answers
		})
	} else {
		got <- struct{}{}
	}
	watching := make(chan struct{}, 10)
	client.PrependWatchReactor("certificatesigningrequests", func(action k8stesting.Action) (bool, watch.Interface, error) {
		w, err := client.Tracker().Watch(csrs, action.GetNamespace())
		watching <- struct{}{}
		return true, w, err
	})
	done := make(chan error, 1)
	var cert []byte
	go func() {
		var err error
		cert, err = WaitForCertificate(ctx, client, name, "uid-1")
		done <- err
	}()
	timeout := time.After(10 * time.Second)
	for watched, read := false, false; !watched || !read; {
		select {
		case <-watching:
			watched = true
		case <-got:
			read = true
		case err := <-done:
			// Decided from the first list (or the Get): no watch needed.
			result := make(chan error, 1)
			result <- err
			return client, result, func() []byte { return cert }
		case <-timeout:
			t.Fatal("the wait opened no watch, or did not read the request")
		}
	}
	return client, done, func() []byte { return cert }
}

// result waits for the wait to end, at most ten seconds.
func result(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("the wait did not end")
		return nil
	}
}

func TestWaitForCertificate(t *testing.T) {
	pending := request(name, "uid-1")
	approved := withCondition(pending, certv1alpha1.CertificateApproved, metav1.ConditionTrue)
	tests := map[string]struct {
		// initial is the request when the wait starts (nil: none yet).
		initial *certv1alpha1.CertificateSigningRequest
		// lagging: the first list does not show initial yet (a lagging
		// watch cache); a Get does.
		lagging bool
		// change is done once the wait watches.
		change func(ctx context.Context, client *fake.Clientset) error
		// want is the certificate; else check judges the error.
		want  []byte
		check func(error) bool
	}{
		"issued before the wait": {initial: withCertificate(approved), want: certPEM},
		"approved, then issued": {initial: approved, want: certPEM, change: func(ctx context.Context, c *fake.Clientset) error {
			_, err := c.CertificatesV1alpha1().CertificateSigningRequests().UpdateStatus(ctx, withCertificate(approved), metav1.UpdateOptions{})
			return err
		}},
		// The caller made the request: not there when the wait begins,
		// it was deleted (no event will come), and the wait ends at once.
		"deleted before the wait":                        {check: gone},
		"deleted before the wait, another request there": {initial: request("other", "uid-9"), check: gone},
		"denied": {initial: pending, check: refused(certv1alpha1.CertificateDenied), change: func(ctx context.Context, c *fake.Clientset) error {
			_, err := c.CertificatesV1alpha1().CertificateSigningRequests().UpdateApproval(ctx, name, withCondition(pending, certv1alpha1.CertificateDenied, metav1.ConditionTrue), metav1.UpdateOptions{})
			return err
		}},
		"failed after approval": {initial: approved, check: refused(certv1alpha1.CertificateFailed), change: func(ctx context.Context, c *fake.Clientset) error {
			_, err := c.CertificatesV1alpha1().CertificateSigningRequests().UpdateStatus(ctx, withCondition(approved, certv1alpha1.CertificateFailed, metav1.ConditionTrue), metav1.UpdateOptions{})
			return err
		}},
		"attestation refused before the wait": {initial: withCondition(pending, certv1alpha1.CertificateAttested, metav1.ConditionFalse), check: refused(certv1alpha1.CertificateAttested)},
		"deleted": {initial: approved, check: gone, change: func(ctx context.Context, c *fake.Clientset) error {
			return c.CertificatesV1alpha1().CertificateSigningRequests().Delete(ctx, name, metav1.DeleteOptions{})
		}},
		"deleted and made again with a new UID": {initial: approved, check: gone, change: func(ctx context.Context, c *fake.Clientset) error {
			if err := c.CertificatesV1alpha1().CertificateSigningRequests().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				return err
			}
			_, err := c.CertificatesV1alpha1().CertificateSigningRequests().Create(ctx, withCertificate(request(name, "uid-2")), metav1.CreateOptions{})
			return err
		}},
		// A watch that broke across the delete relists: the new request
		// arrives as an update.
		"replaced, the delete not seen": {initial: approved, check: gone, change: func(ctx context.Context, c *fake.Clientset) error {
			_, err := c.CertificatesV1alpha1().CertificateSigningRequests().UpdateStatus(ctx, withCertificate(request(name, "uid-2")), metav1.UpdateOptions{})
			return err
		}},
		"replaced before the wait": {initial: withCertificate(request(name, "uid-2")), check: gone},
		// A list from a lagging watch cache is no proof that the request
		// is gone: a consistent Get decides.
		"not yet in a lagging list, then issued": {initial: approved, lagging: true, want: certPEM, change: func(ctx context.Context, c *fake.Clientset) error {
			_, err := c.CertificatesV1alpha1().CertificateSigningRequests().UpdateStatus(ctx, withCertificate(approved), metav1.UpdateOptions{})
			return err
		}},
		"not yet in a lagging list, issued already": {initial: withCertificate(approved), lagging: true, want: certPEM},
		"not yet in a lagging list, denied already": {initial: withCondition(pending, certv1alpha1.CertificateDenied, metav1.ConditionTrue), lagging: true, check: refused(certv1alpha1.CertificateDenied)},
		"not yet in a lagging list, replaced":       {initial: withCertificate(request(name, "uid-2")), lagging: true, check: gone},
		"not in a lagging list, and deleted":        {lagging: true, check: gone},
		"another request's decision is not this one's": {initial: approved, want: certPEM, change: func(ctx context.Context, c *fake.Clientset) error {
			other := withCondition(request("other", "uid-9"), certv1alpha1.CertificateDenied, metav1.ConditionTrue)
			if _, err := c.CertificatesV1alpha1().CertificateSigningRequests().Create(ctx, other, metav1.CreateOptions{}); err != nil {
				return err
			}
			_, err := c.CertificatesV1alpha1().CertificateSigningRequests().UpdateStatus(ctx, withCertificate(approved), metav1.UpdateOptions{})
			return err
		}},
	}
	for tname, tc := range tests {
		t.Run(tname, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var initial []*certv1alpha1.CertificateSigningRequest
			if tc.initial != nil {
				initial = append(initial, tc.initial)
			}
			client, done, cert := waitOn(t, ctx, tc.lagging, initial...)
			if tc.change != nil {
				if err := tc.change(ctx, client); err != nil {
					t.Fatal(err)
				}
			}
			err := result(t, done)
			if tc.check != nil {
				if !tc.check(err) {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err != nil || string(cert()) != string(tc.want) {
				t.Fatalf("certificate %q, %v; want %q", cert(), err, tc.want)
			}
		})
	}
}

// refused checks for a *RefusedError of condition t carrying the
// condition's reason and message.
func refused(t certv1alpha1.RequestConditionType) func(error) bool {
	return func(err error) bool {
		var r *RefusedError
		return errors.As(err, &r) && r.Request == name && r.Condition == string(t) &&
			r.Reason == "Because"+string(t) && r.Message == "the "+string(t)+" message"
	}
}

func gone(err error) bool { return errors.Is(err, ErrGone) }

// A request nobody decides ends the wait at the context's deadline, with
// the deadline as the cause.
func TestWaitForCertificateEndsWithTheContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, done, _ := waitOn(t, ctx, false, withCondition(request(name, "uid-1"), certv1alpha1.CertificateApproved, metav1.ConditionTrue))
	if err := result(t, done); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want the deadline", err)
	}
}

func TestDecided(t *testing.T) {
	pending := request(name, "uid-1")
	for tname, tc := range map[string]struct {
		csr        *certv1alpha1.CertificateSigningRequest
		done, cert bool
	}{
		"pending":           {csr: pending},
		"approved":          {csr: withCondition(pending, certv1alpha1.CertificateApproved, metav1.ConditionTrue)},
		"attested":          {csr: withCondition(pending, certv1alpha1.CertificateAttested, metav1.ConditionTrue)},
		"issued":            {csr: withCertificate(pending), done: true, cert: true},
		"denied":            {csr: withCondition(pending, certv1alpha1.CertificateDenied, metav1.ConditionTrue), done: true},
		"failed":            {csr: withCondition(pending, certv1alpha1.CertificateFailed, metav1.ConditionTrue), done: true},
		"attestation false": {csr: withCondition(pending, certv1alpha1.CertificateAttested, metav1.ConditionFalse), done: true},
	} {
		done, cert, err := Decided(tc.csr)
		if done != tc.done || (cert != nil) != tc.cert || (err != nil) != (tc.done && !tc.cert) {
			t.Errorf("%s: done %v, certificate %q, err %v", tname, done, cert, err)
		}
	}
}
