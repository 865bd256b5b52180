package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"rekey.io/rekey/pkg/authority"
	"rekey.io/rekey/pkg/controller/publisher"
	"rekey.io/rekey/pkg/servingcert"
	"rekey.io/rekey/test/framework"
)

// steadyServingCA is the serving CA of TestPublishAndServingCAAreQuietOnceSettled.
const steadyServingCA = "rekey.io-serving-steady"

// TestPublishAndServingCAAreQuietOnceSettled: once rekey serves from its
// own CA, every APIService trusts it and a CA's bundles are published,
// neither the serving-certificate manager nor the publisher makes a
// request for a whole minute, in which a selected namespace's annotations
// change: no write to kube-apiserver or to rekey, no GET of an APIService
// or of a published object (kube-apiserver's and rekey's audit logs). Then
// the CA is deleted and what it published is removed.
func TestPublishAndServingCAAreQuietOnceSettled(t *testing.T) {
	for _, resource := range []string{"rotation.rekey.io", "apiservices", "configmaps", "clustertrustbundles"} {
		if !strings.Contains(auditPolicy, resource) {
			t.Fatalf("auditPolicy does not log %s: this test counts requests in the audit logs", resource)
		}
	}
	ctx := context.Background()
	admin := cluster.RekeyAdmin
	if err := cluster.RestartRekey("--serving-ca=" + steadyServingCA); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Back to the harness's serving certificate for the other tests.
		if err := cluster.RestartRekeyWithHarnessServing(); err != nil {
			t.Errorf("restarting rekey with the harness's serving certificate: %v", err)
		}
	})

	// Rekey serves a certificate of its CA, which every APIService trusts
	// (until then, the aggregator may not reach it).
	framework.Eventually(t, 90*time.Second, "rekey serving from its CA", func(ctx context.Context) error {
		serving, err := admin.RotationV1alpha1().CertificateAuthorities().Get(ctx, steadyServingCA, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if serving.Status.Current == nil {
			return errors.New("the serving CA has no certificate yet")
		}
		caCert, err := authority.ParseCertificatePEM(serving.Status.Current.Certificate)
		if err != nil {
			return err
		}
		if err := servesCertificateOf(caCert); err != nil {
			return err
		}
		for _, name := range framework.APIServiceNames {
			out, _, err := framework.RunKubectl(t, cluster.AdminKubeconfig, nil, "get", "apiservice", name, "-o", "jsonpath={.spec.caBundle}")
			if err != nil {
				return err
			}
			if bundle, _ := base64.StdEncoding.DecodeString(strings.TrimSpace(out)); string(bundle) != serving.Status.TrustBundle {
				return fmt.Errorf("APIService %s does not trust the serving CA yet", name)
			}
		}
		return nil
	})
	waitAvailable(t)

	publishingCA(t, "steady", "")
	ctbName := publisher.ClusterTrustBundleName("example.com/steady", "steady-ca")
	// The CA's bundle is everywhere it asked.
	framework.Eventually(t, 60*time.Second, "the bundles published", func(ctx context.Context) error {
		ca, err := admin.RotationV1alpha1().CertificateAuthorities().Get(ctx, "steady-ca", metav1.GetOptions{})
		if err != nil || ca.Status.TrustBundle == "" {
			return fmt.Errorf("steady-ca has no bundle yet (%v)", err)
		}
		for _, ns := range []string{"steady-listed", "steady-selected"} {
			cm, err := cluster.Admin.CoreV1().ConfigMaps(ns).Get(ctx, "steady-ca", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if cm.Data[publisher.BundleKey] != ca.Status.TrustBundle {
				return fmt.Errorf("ConfigMap %s/steady-ca is not the CA's bundle yet", ns)
			}
		}
		ctb, err := cluster.Admin.CertificatesV1().ClusterTrustBundles().Get(ctx, ctbName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ctb.Spec.TrustBundle != ca.Status.TrustBundle {
			return errors.New("the ClusterTrustBundle is not the CA's bundle yet")
		}
		return nil
	})

	// Witnesses that the logs show what is counted: GETs of an APIService
	// (kube-apiserver) and of a CertificateAuthority (rekey), both made by
	// the admin above.
	kubeLog, rekeyLog := &auditTail{path: kubeAuditLog}, &auditTail{path: rekeyAuditLog}
	var sawAPIService, sawCA bool
	framework.Eventually(t, 30*time.Second, "the audit logs show what is counted (see auditPolicy)", func(context.Context) error {
		if err := kubeLog.each(func(ev *auditv1.Event) {
			sawAPIService = sawAPIService || ev.Verb == "get" && ev.ObjectRef.Resource == "apiservices" && ev.User.Username == "e2e-admin"
		}); err != nil {
			return err
		}
		if err := rekeyLog.each(func(ev *auditv1.Event) {
			sawCA = sawCA || ev.Verb == "get" && ev.ObjectRef.Resource == "certificateauthorities" && ev.User.Username == "e2e-admin"
		}); err != nil {
			return err
		}
		if !sawAPIService || !sawCA {
			return fmt.Errorf("admin's GET of an APIService logged: %v, of a CertificateAuthority: %v", sawAPIService, sawCA)
		}
		return nil
	})

	// The window, with a selected namespace's annotations changing: no
	// label change, so nothing to publish. The admin reads a published
	// ConfigMap and the serving CA at each change, which both logs must
	// show: they are read through the whole window.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for i := 0; ; i++ {
			patch := fmt.Sprintf(`{"metadata":{"annotations":{"rekey-e2e-steady":"%d"}}}`, i)
			if _, err := cluster.Admin.CoreV1().Namespaces().Patch(ctx, "steady-selected", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Errorf("annotating namespace steady-selected: %v", err)
			}
			if _, err := cluster.Admin.CoreV1().ConfigMaps("steady-selected").Get(ctx, "steady-ca", metav1.GetOptions{}); err != nil {
				t.Errorf("reading the published ConfigMap: %v", err)
			}
			if _, err := admin.RotationV1alpha1().CertificateAuthorities().Get(ctx, steadyServingCA, metav1.GetOptions{}); err != nil {
				t.Errorf("reading the serving CA: %v", err)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	start := time.Now()
	var kubeSeen, rekeySeen int // the admin's reads
	framework.Stays(t, time.Minute, "no request from the serving-certificate manager or the publisher once settled", func(context.Context) error {
		var bad []string
		err := kubeLog.each(func(ev *auditv1.Event) {
			if ev.User.Username == "e2e-admin" && ev.Verb == "get" && ev.ObjectRef.Resource == "configmaps" {
				kubeSeen++
			}
			if ev.User.Username != framework.RekeyServiceAccountUser {
				return
			}
			switch ref := ev.ObjectRef; ref.Resource {
			case "apiservices", "configmaps", "clustertrustbundles":
				// The delegated authentication's own ConfigMap is not
				// the publisher's.
				if ev.Verb != "list" && ev.Verb != "watch" && (ref.Namespace != "kube-system" || ref.Name != "extension-apiserver-authentication") {
					bad = append(bad, describeAuditEvent(ev))
				}
			}
		})
		if err != nil {
			return err
		}
		if err := rekeyLog.each(func(ev *auditv1.Event) {
			if ev.User.Username == "e2e-admin" && ev.Verb == "get" && ev.ObjectRef.Name == steadyServingCA {
				rekeySeen++
			}
			if ev.ObjectRef.Resource != "certificateauthorities" {
				return
			}
			if strings.HasSuffix(ev.UserAgent, "/"+servingcert.UserAgent) && ev.Verb != "list" && ev.Verb != "watch" ||
				strings.Contains(ev.RequestURI, "fieldManager=rekey-serving-ca") {
				bad = append(bad, describeAuditEvent(ev))
			}
		}); err != nil {
			return err
		}
		if len(bad) > 0 {
			return fmt.Errorf("after %v: %s", time.Since(start).Round(time.Second), strings.Join(bad, "; "))
		}
		return nil
	})
	close(stop)
	wg.Wait()
	// 13 reads in the minute; the last ones may not be logged yet.
	if kubeSeen < 10 || rekeySeen < 10 {
		t.Fatalf("the audit logs showed %d and %d of the admin's 13 reads in the minute: the window was not watched", kubeSeen, rekeySeen)
	}
	t.Logf("no request from the serving-certificate manager or the publisher in the minute (%d and %d of the admin's reads seen in the logs)", kubeSeen, rekeySeen)

	// A CA deleted: what it published goes.
	if err := admin.RotationV1alpha1().CertificateAuthorities().Delete(ctx, "steady-ca", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 60*time.Second, "the deleted CA's bundles removed", func(ctx context.Context) error {
		for _, ns := range []string{"steady-listed", "steady-selected"} {
			if _, err := cluster.Admin.CoreV1().ConfigMaps(ns).Get(ctx, "steady-ca", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("ConfigMap %s/steady-ca: %v", ns, err)
			}
		}
		if _, err := cluster.Admin.CertificatesV1().ClusterTrustBundles().Get(ctx, ctbName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("ClusterTrustBundle %s: %v", ctbName, err)
		}
		return nil
	})
}

// servesCertificateOf says why rekey's port does not serve a certificate
// signed by ca (nil when it does).
func servesCertificateOf(ca *x509.Certificate) error {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", fmt.Sprintf("127.0.0.1:%d", cluster.RekeyPort), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	if err := conn.ConnectionState().PeerCertificates[0].CheckSignatureFrom(ca); err != nil {
		return fmt.Errorf("rekey does not serve a certificate of its serving CA yet: %w", err)
	}
	return nil
}

func describeAuditEvent(ev *auditv1.Event) string {
	return fmt.Sprintf("%s %s %s/%s by %s (%s)", ev.Verb, ev.ObjectRef.Resource, ev.ObjectRef.Namespace, ev.ObjectRef.Name, ev.User.Username, ev.UserAgent)
}

// auditTail reads the events an audit log gains: each call sees the
// ResponseComplete events written since the last.
type auditTail struct {
	path   string
	offset int64
}

func (a *auditTail) each(f func(*auditv1.Event)) error {
	file, err := os.Open(a.path)
	if err != nil {
		return err
	}
	defer func() { _ = file.Close() }()
	if _, err := file.Seek(a.offset, io.SeekStart); err != nil {
		return err
	}
	data, err := io.ReadAll(file)
	if err != nil {
		return err
	}
	// Only whole lines: the rest is read next time.
	end := bytes.LastIndexByte(data, '\n') + 1
	a.offset += int64(end)
	for _, line := range bytes.Split(data[:end], []byte("\n")) {
		var ev auditv1.Event
		if json.Unmarshal(line, &ev) != nil || ev.ObjectRef == nil || ev.Stage != auditv1.StageResponseComplete {
			continue
		}
		f(&ev)
	}
	return nil
}
