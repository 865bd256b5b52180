package server

import (
	"io"
	"strings"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/features"
	genericapiserver "k8s.io/apiserver/pkg/server"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/rest"

	"rekey.io/rekey/pkg/apiserver"
	"rekey.io/rekey/pkg/signing/keystorepaths"
)

func joinErrors(errs []error) string {
	var b strings.Builder
	for _, e := range errs {
		b.WriteString(e.Error())
		b.WriteString("\n")
	}
	return b.String()
}

// check runs one validation table row: no errors when want is empty, else
// an error containing want.
func check(t *testing.T, errs []error, want string) {
	t.Helper()
	if want == "" && len(errs) != 0 {
		t.Fatalf("valid options refused: %v", errs)
	}
	if want != "" && !strings.Contains(joinErrors(errs), want) {
		t.Fatalf("errors %v do not mention %q", errs, want)
	}
}

func TestControllerOptionsValidate(t *testing.T) {
	tests := map[string]struct {
		mutate func(*ControllerOptions)
		want   string
	}{
		"defaults":             {mutate: func(*ControllerOptions) {}},
		"no workers":           {mutate: func(o *ControllerOptions) { o.SignerWorkers = 0 }, want: "--signer-workers"},
		"short lease":          {mutate: func(o *ControllerOptions) { o.LeaseDuration = time.Millisecond }, want: "--leader-elect-lease-duration"},
		"fast cleaner":         {mutate: func(o *ControllerOptions) { o.CleanerInterval = 0 }, want: "--csr-cleaner-interval"},
		"relative prefix":      {mutate: func(o *ControllerOptions) { o.PrivatePrefix = "rekey" }, want: "--etcd-private-prefix"},
		"prefix with trailing": {mutate: func(o *ControllerOptions) { o.PrivatePrefix = "/rekey/" }, want: "--etcd-private-prefix"},
		"negative burst":       {mutate: func(o *ControllerOptions) { o.RequesterIssuanceBurst = -1 }, want: "--requester-issuance-burst"},
		"no interval":          {mutate: func(o *ControllerOptions) { o.RequesterIssuanceInterval = 0 }, want: "--requester-issuance-interval"},
		"limit off":            {mutate: func(o *ControllerOptions) { o.RequesterIssuanceBurst, o.RequesterIssuanceInterval = 0, 0 }},
		"no kube qps":          {mutate: func(o *ControllerOptions) { o.KubeAPIQPS = 0 }, want: "--kube-api-qps"},
		"no kube burst":        {mutate: func(o *ControllerOptions) { o.KubeAPIBurst = 0 }, want: "--kube-api-burst"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := NewControllerOptions()
			tc.mutate(o)
			check(t, o.Validate(), tc.want)
		})
	}
}

// TestKubeAPILimits: the host cluster client gets --kube-api-qps and
// --kube-api-burst (unset, client-go's 5 a second throttled the
// PodCertificateRequest controller to under two requests a second), on a
// copy: the generic server's own client config is not changed.
func TestKubeAPILimits(t *testing.T) {
	o := NewControllerOptions()
	o.KubeAPIQPS, o.KubeAPIBurst = 300, 600
	generic := &rest.Config{Host: "https://kube.example"}
	extra := apiserver.ExtraConfig{KubeConfig: generic}
	o.ApplyTo(&extra)
	if extra.KubeConfig.QPS != 300 || extra.KubeConfig.Burst != 600 || extra.KubeConfig.Host != generic.Host {
		t.Fatalf("host cluster client: QPS %v, burst %d, host %q; want 300, 600, %q", extra.KubeConfig.QPS, extra.KubeConfig.Burst, extra.KubeConfig.Host, generic.Host)
	}
	if generic.QPS != 0 || generic.Burst != 0 {
		t.Fatalf("the generic server's client config was changed: QPS %v, burst %d", generic.QPS, generic.Burst)
	}
	standalone := apiserver.ExtraConfig{}
	o.ApplyTo(&standalone)
	if standalone.KubeConfig != nil {
		t.Fatal("standalone (no --kubeconfig) got a host cluster client config")
	}
}

func TestKeyStoreOptionsValidate(t *testing.T) {
	tests := map[string]struct {
		o    KeyStoreOptions
		want string
	}{
		"KEK only":          {o: KeyStoreOptions{KEKFile: "/etc/rekey/kek"}},
		"no KEK":            {o: KeyStoreOptions{}, want: "--ca-key-encryption-key-file or --ca-key-encryption-key-secret is required"},
		"KEK Secret":        {o: KeyStoreOptions{KEKSecret: "rekey-system/rekey-ca-kek"}},
		"both KEKs":         {o: KeyStoreOptions{KEKFile: "/k", KEKSecret: "rekey-system/rekey-ca-kek"}, want: "exclusive"},
		"KEK Secret no ns":  {o: KeyStoreOptions{KEKSecret: "rekey-ca-kek"}, want: "NAMESPACE/NAME"},
		"KEK Secret bad":    {o: KeyStoreOptions{KEKSecret: "Rekey/x"}, want: "NAMESPACE/NAME"},
		"relative module":   {o: KeyStoreOptions{KEKFile: "/k", Allowed: keystorepaths.Allowed{PKCS11Modules: []string{"lib.so"}}}, want: "--pkcs11-module"},
		"root as directory": {o: KeyStoreOptions{KEKFile: "/k", Allowed: keystorepaths.Allowed{Dirs: []string{"/"}}}, want: "--file-keystore-dir"},
		"unclean directory": {o: KeyStoreOptions{KEKFile: "/k", Allowed: keystorepaths.Allowed{Dirs: []string{"/etc/../etc/rekey"}}}, want: "--file-keystore-dir"},
		"allow-lists":       {o: KeyStoreOptions{KEKFile: "/k", Allowed: keystorepaths.Allowed{PKCS11Modules: []string{"/usr/lib/softhsm/libsofthsm2.so"}, Dirs: []string{"/etc/rekey"}}}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) { check(t, tc.o.Validate(), tc.want) })
	}
}

func TestAuthorizationRateOptionsValidate(t *testing.T) {
	for name, tc := range map[string]struct {
		o    AuthorizationRateOptions
		want string
	}{
		"defaults":   {o: *NewAuthorizationRateOptions()},
		"zero QPS":   {o: AuthorizationRateOptions{QPS: 0, Burst: 1}, want: "--authorization-webhook-qps"},
		"zero burst": {o: AuthorizationRateOptions{QPS: 1, Burst: 0}, want: "--authorization-webhook-burst"},
	} {
		t.Run(name, func(t *testing.T) { check(t, tc.o.Validate(), tc.want) })
	}
}

func TestStandaloneOptionsValidate(t *testing.T) {
	o := NewStandaloneOptions(io.Discard)
	check(t, o.Validate(), "")
	o.Enabled, o.DataDir = true, ""
	check(t, o.Validate(), "--data-dir")
}

// TestStandaloneCompleteMakesPKIAndKEK: standalone mode fills in the serving
// certificate, client CA, key-encryption key and the embedded etcd socket.
func TestStandaloneCompleteMakesPKIAndKEK(t *testing.T) {
	o := NewOptions(io.Discard, io.Discard)
	o.Standalone.Enabled = true
	o.Standalone.DataDir = t.TempDir()
	if err := o.Complete(); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatalf("completed standalone options do not validate: %v", err)
	}
	ro := o.RecommendedOptions
	if got := ro.Etcd.StorageConfig.Transport.ServerList; len(got) != 1 || !strings.HasPrefix(got[0], "unix://") {
		t.Fatalf("etcd servers %v, want the embedded etcd's unix socket", got)
	}
	if !strings.HasPrefix(o.KeyStores.KEKFile, o.Standalone.DataDir) || ro.SecureServing.ServerCert.CertKey.CertFile == "" || ro.Authentication.ClientCert.ClientCA == "" {
		t.Fatalf("standalone PKI not filled in: KEK %q, serving %q, client CA %q", o.KeyStores.KEKFile, ro.SecureServing.ServerCert.CertKey.CertFile, ro.Authentication.ClientCert.ClientCA)
	}
	var extra apiserver.ExtraConfig
	o.Controllers.ApplyTo(&extra)
	o.KeyStores.ApplyTo(&extra)
	if extra.Etcd.PrivatePrefix != "/rekey.io-private" || extra.KeyStores.KEKFile != o.KeyStores.KEKFile || extra.Controllers.SignerWorkers != 8 || extra.Controllers.Identity == "" {
		t.Fatalf("ApplyTo: %+v", extra)
	}
}

func TestAggregatedModeNeedsEtcdAndKEK(t *testing.T) {
	o := NewOptions(io.Discard, io.Discard)
	if err := o.Complete(); err != nil {
		t.Fatal(err)
	}
	err := o.Validate()
	if err == nil || !strings.Contains(err.Error(), "--etcd-servers") || !strings.Contains(err.Error(), "--ca-key-encryption-key-file") {
		t.Fatalf("error = %v, want both --etcd-servers and --ca-key-encryption-key-file", err)
	}
}

// TestEmbeddedEtcdDir: aggregated mode with an embedded etcd stores in it,
// on a unix socket in the directory; --etcd-servers with it is refused.
func TestEmbeddedEtcdDir(t *testing.T) {
	o := NewOptions(io.Discard, io.Discard)
	o.EmbeddedEtcd.Dir = t.TempDir()
	o.KeyStores.KEKSecret = "rekey-system/rekey-ca-kek"
	if err := o.Complete(); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatalf("embedded etcd with a KEK Secret does not validate: %v", err)
	}
	got := o.RecommendedOptions.Etcd.StorageConfig.Transport.ServerList
	if len(got) != 1 || got[0] != "unix://"+o.EmbeddedEtcd.Dir+"/etcd.sock" {
		t.Fatalf("etcd servers %v, want the socket in %s", got, o.EmbeddedEtcd.Dir)
	}

	o = NewOptions(io.Discard, io.Discard)
	o.EmbeddedEtcd.Dir = t.TempDir()
	o.RecommendedOptions.Etcd.StorageConfig.Transport.ServerList = []string{"https://etcd:2379"}
	if err := o.Complete(); err == nil || !strings.Contains(err.Error(), "exclusive") {
		t.Fatalf("error = %v, want --embedded-etcd-dir and --etcd-servers refused together", err)
	}
}

// TestHelpShowsTheRealFeatureDefault: the default is overridden in the
// gate itself, so --help prints false for WatchListCompression.
func TestHelpShowsTheRealFeatureDefault(t *testing.T) {
	if utilfeature.DefaultFeatureGate.Enabled(features.WatchListCompression) {
		t.Fatal("WatchListCompression is on by default")
	}
	fss := NewOptions(io.Discard, io.Discard).Flags()
	fs := fss.FlagSet("generic")
	usage := fs.Lookup("feature-gates").Usage
	if !strings.Contains(usage, "WatchListCompression=true|false (BETA - default=false)") {
		t.Fatalf("--feature-gates help does not show the default false:\n%s", usage)
	}
}

// TestPriorityAndFairnessIsOffUnlessAskedFor: behind the aggregation layer
// kube-apiserver's priority and fairness has already admitted the request;
// the flag still turns rekey's own on.
func TestPriorityAndFairnessIsOffUnlessAskedFor(t *testing.T) {
	o := NewOptions(io.Discard, io.Discard)
	if o.RecommendedOptions.Features.EnablePriorityAndFairness {
		t.Fatal("priority and fairness is on by default")
	}
	fss := o.Flags()
	fs := fss.FlagSet("generic")
	if got := fs.Lookup("enable-priority-and-fairness").DefValue; got != "false" {
		t.Fatalf("--enable-priority-and-fairness help shows default %s, want false", got)
	}
	if err := fs.Parse([]string{"--enable-priority-and-fairness=true"}); err != nil {
		t.Fatal(err)
	}
	if !o.RecommendedOptions.Features.EnablePriorityAndFairness {
		t.Fatal("--enable-priority-and-fairness=true did not turn it on")
	}
}

func TestInFlightOptions(t *testing.T) {
	o := NewOptions(io.Discard, io.Discard)
	if o.InFlight.MaxRequestsInFlight != 400 || o.InFlight.MaxMutatingRequestsInFlight != 200 {
		t.Fatalf("defaults %+v, want kube-apiserver's 400 and 200", *o.InFlight)
	}
	fss := o.Flags()
	if err := fss.FlagSet("generic").Parse([]string{"--max-requests-inflight=7", "--max-mutating-requests-inflight=3"}); err != nil {
		t.Fatal(err)
	}
	check(t, o.InFlight.Validate(), "")
	var c genericapiserver.Config
	o.InFlight.ApplyTo(&c)
	if c.MaxRequestsInFlight != 7 || c.MaxMutatingRequestsInFlight != 3 {
		t.Fatalf("applied %d and %d, want 7 and 3", c.MaxRequestsInFlight, c.MaxMutatingRequestsInFlight)
	}
	o.InFlight.MaxMutatingRequestsInFlight = -1
	check(t, o.InFlight.Validate(), "--max-mutating-requests-inflight must not be negative")
}

func TestGCOptions(t *testing.T) {
	o := NewOptions(io.Discard, io.Discard)
	if got, err := o.GC.floorBytes(); err != nil || got != 0 {
		t.Fatalf("default floor %d (%v), want none", got, err)
	}
	fss := o.Flags()
	if err := fss.FlagSet("generic").Parse([]string{"--gc-heap-floor=1Gi"}); err != nil {
		t.Fatal(err)
	}
	check(t, o.GC.Validate(), "")
	if got, _ := o.GC.floorBytes(); got != 1<<30 {
		t.Fatalf("--gc-heap-floor=1Gi gave %d bytes", got)
	}
	for value, want := range map[string]string{
		"0":     "",
		"300M":  "",
		"-1Mi":  "must not be negative",
		"lots":  "--gc-heap-floor \"lots\"",
		"0.5":   "not a whole number of bytes",
		"":      "--gc-heap-floor",
		"1e100": "not a whole number of bytes",
	} {
		o.GC.HeapFloor = value
		check(t, o.GC.Validate(), want)
	}
}

func TestServingCAOptionsValidate(t *testing.T) {
	for name, tc := range map[string]struct {
		mutate func(*ServingCAOptions)
		want   string
	}{
		"off by default": {mutate: func(*ServingCAOptions) {}},
		"on":             {mutate: func(o *ServingCAOptions) { o.CAName = "rekey.io-serving" }},
		"bad CA name":    {mutate: func(o *ServingCAOptions) { o.CAName = "Bad_Name" }, want: "--serving-ca"},
		"no hosts":       {mutate: func(o *ServingCAOptions) { o.CAName = "ca"; o.Hosts = nil }, want: "--serving-ca-hosts"},
		"bad host":       {mutate: func(o *ServingCAOptions) { o.CAName = "ca"; o.Hosts = []string{"not a host"} }, want: "--serving-ca-hosts"},
	} {
		t.Run(name, func(t *testing.T) {
			o := NewServingCAOptions()
			tc.mutate(o)
			check(t, o.Validate(), tc.want)
		})
	}
}
