package agent

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRunOptionsValidate(t *testing.T) {
	valid := func() *RunOptions {
		return &RunOptions{BootstrapKubeconfig: "b", CertDir: "d", NodeName: "n", SignerName: DefaultSignerName, ServingSignerName: DefaultServingSignerName}
	}
	tests := map[string]struct {
		mutate func(*RunOptions)
		want   string
	}{
		"valid":                     {mutate: func(*RunOptions) {}},
		"no bootstrap kubeconfig":   {mutate: func(o *RunOptions) { o.BootstrapKubeconfig = "" }, want: "--bootstrap-kubeconfig"},
		"no cert dir":               {mutate: func(o *RunOptions) { o.CertDir = "" }, want: "--cert-dir"},
		"no node name":              {mutate: func(o *RunOptions) { o.NodeName = "" }, want: "--node-name"},
		"short lifetime":            {mutate: func(o *RunOptions) { o.ExpirationSeconds = 60 }, want: "--expiration-seconds"},
		"serving without addresses": {mutate: func(o *RunOptions) { o.Serving = true }, want: "--node-ip"},
		"addresses without serving": {mutate: func(o *RunOptions) { o.NodeIPs = []net.IP{net.ParseIP("10.0.0.1")} }, want: "--serving"},
		"tpm without a policy":      {mutate: func(o *RunOptions) { o.TPM = "/dev/tpmrm0" }, want: "--attestation-policy"},
		"policy without a tpm":      {mutate: func(o *RunOptions) { o.AttestationPolicy = "p" }, want: "--tpm"},
		"tpm with a policy":         {mutate: func(o *RunOptions) { o.TPM, o.AttestationPolicy, o.TPMEK = "tcp://127.0.0.1:2321", "p", "ecc" }},
		"unknown EK type":           {mutate: func(o *RunOptions) { o.TPM, o.AttestationPolicy, o.TPMEK = "tcp://127.0.0.1:2321", "p", "dsa" }, want: "--tpm-ek"},
		"negative revocation check": {mutate: func(o *RunOptions) { o.RevocationCheckInterval = -time.Second }, want: "--revocation-check-interval"},
		"revocation check under 1s": {mutate: func(o *RunOptions) { o.RevocationCheckInterval = time.Millisecond }, want: "--revocation-check-interval"},
		"revocation check off":      {mutate: func(o *RunOptions) { o.RevocationCheckInterval = 0 }},
		"serving with an address": {mutate: func(o *RunOptions) {
			o.Serving, o.NodeDNSNames = true, []string{"n.example.com"}
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := valid()
			tc.mutate(o)
			err := o.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate = %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

func TestExecCredentialWithoutACertificateFails(t *testing.T) {
	var out bytes.Buffer
	cmd := NewCommand(&out)
	cmd.SetArgs([]string{"exec-credential", "--cert-dir", t.TempDir()})
	cmd.SetErr(&bytes.Buffer{})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "no usable client certificate") || out.Len() != 0 {
		t.Fatalf("err %v, out %q", err, out.String())
	}
}

// run and exec-credential refuse a --cert-dir others may write before
// reading or writing anything in it; run makes a missing one, mode 0700.
func TestCertDirOthersCanWriteIsRefused(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	o := &RunOptions{BootstrapKubeconfig: filepath.Join(t.TempDir(), "missing"), CertDir: dir, NodeName: "n", SignerName: DefaultSignerName, Once: true}
	if err := o.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "--cert-dir") || !strings.Contains(err.Error(), "writable") {
		t.Fatalf("run with a world-writable --cert-dir: %v", err)
	}
	var out bytes.Buffer
	cmd := NewCommand(&out)
	cmd.SetArgs([]string{"exec-credential", "--cert-dir", dir})
	cmd.SetErr(&bytes.Buffer{})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "writable") || out.Len() != 0 {
		t.Fatalf("exec-credential with a world-writable --cert-dir: %v, out %q", err, out.String())
	}

	missing := filepath.Join(t.TempDir(), "pki")
	o.CertDir = missing
	if err := o.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "--bootstrap-kubeconfig") {
		t.Fatalf("run with a missing --cert-dir went on to %v, want the bootstrap kubeconfig's error", err)
	}
	if fi, err := os.Stat(missing); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the --cert-dir run made: %v, want mode 0700", err)
	}
}

// trust-sync's flags reach the options as given (--ca and --include
// repeatable, not split at commas) and a bad consumer name is refused
// before any server is asked (none is reachable here).
func TestTrustSyncFlags(t *testing.T) {
	cmd := NewCommand(&bytes.Buffer{})
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs([]string{"trust-sync", "--kubeconfig", filepath.Join(t.TempDir(), "missing"), "--consumer", "Kube_APIServer",
		"--file", filepath.Join(t.TempDir(), "ca.crt"), "--ca", "a", "--ca", "b", "--once"})
	err := cmd.ExecuteContext(context.Background())
	if err == nil || !strings.Contains(err.Error(), `--consumer "Kube_APIServer" is not a valid TrustConsumer name`) {
		t.Fatalf("a bad consumer name: %v", err)
	}
	sync, _, err := cmd.Find([]string{"trust-sync"})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"kubeconfig", "consumer", "file", "ca", "include", "once", "exec", "resync"} {
		if sync.Flags().Lookup(name) == nil {
			t.Errorf("no --%s", name)
		}
	}
	if cas, err := sync.Flags().GetStringArray("ca"); err != nil || strings.Join(cas, "|") != "a|b" {
		t.Errorf("--ca parsed as %v, %v", cas, err)
	}
	// The file is re-checked on a timer by default (an overwritten file is
	// repaired without waiting for a CA change).
	if resync, err := sync.Flags().GetDuration("resync"); err != nil || resync != 30*time.Second {
		t.Errorf("--resync defaults to %v, %v; want 30s", resync, err)
	}
}

// jwt-signer's defaults are the documented ones, and bad flags are
// refused before any server is asked (none is reachable here).
func TestJWTSignerFlags(t *testing.T) {
	cmd := NewCommand(&bytes.Buffer{})
	signer, _, err := cmd.Find([]string{"jwt-signer"})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"socket":                "/run/rekey/jwt-signer.sock",
		"socket-mode":           "0600",
		"cache-file":            "/var/lib/rekey/jwt-signer/keys.json",
		"refresh-hint":          "30s",
		"kubeconfig":            "",
		"certificate-authority": "",
		"metrics-bind-address":  "",
	} {
		f := signer.Flags().Lookup(name)
		if f == nil {
			t.Errorf("no --%s", name)
			continue
		}
		if f.DefValue != want {
			t.Errorf("--%s defaults to %q, want %q", name, f.DefValue, want)
		}
	}
	if def, err := defaultTrustConsumer(); err != nil {
		t.Logf("this host has no usable host name: %v", err)
	} else if f := signer.Flags().Lookup("trust-consumer"); f == nil || f.DefValue != def || !strings.HasPrefix(f.DefValue, "kube-apiserver-jwt.") {
		t.Errorf("--trust-consumer: %+v, want kube-apiserver-jwt.<host name>", f)
	}

	missing := filepath.Join(t.TempDir(), "missing")
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no CA":            {nil, "--certificate-authority is required"},
		"bad mode":         {[]string{"--certificate-authority", "sa", "--socket-mode", "rw"}, `--socket-mode "rw"`},
		"mode too large":   {[]string{"--certificate-authority", "sa", "--socket-mode", "1777"}, "--socket-mode"},
		"bad consumer":     {[]string{"--certificate-authority", "sa", "--trust-consumer", "Kube_API"}, "--trust-consumer"},
		"short hint":       {[]string{"--certificate-authority", "sa", "--refresh-hint", "100ms"}, "--refresh-hint"},
		"bad kubeconfig":   {[]string{"--certificate-authority", "sa"}, "--kubeconfig"},
		"abstract":         {[]string{"--certificate-authority", "sa", "--socket", "@rekey-jwt"}, "--allow-abstract-socket"},
		"abstract allowed": {[]string{"--certificate-authority", "sa", "--socket", "@rekey-jwt", "--allow-abstract-socket"}, "--kubeconfig"},
		"negative uid":     {[]string{"--certificate-authority", "sa", "--allowed-uids", "-1"}, "--allowed-uids"},
		"uid too large":    {[]string{"--certificate-authority", "sa", "--allowed-uids", "0,4294967296"}, "--allowed-uids"},
		"uids":             {[]string{"--certificate-authority", "sa", "--allowed-uids", "0,1000"}, "--kubeconfig"},
	} {
		t.Run(name, func(t *testing.T) {
			cmd := NewCommand(&bytes.Buffer{})
			cmd.SetOut(&bytes.Buffer{})
			cmd.SetErr(&bytes.Buffer{})
			cmd.SetArgs(append([]string{"jwt-signer", "--kubeconfig", missing, "--socket", filepath.Join(t.TempDir(), "s.sock")}, tc.args...))
			if err := cmd.ExecuteContext(context.Background()); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
}

// jwt-signer --help says what kube-apiserver is started with, and names
// every flag.
func TestJWTSignerHelp(t *testing.T) {
	var out bytes.Buffer
	root := NewCommand(&out)
	root.SetOut(&out)
	root.SetArgs([]string{"jwt-signer", "--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--service-account-signing-endpoint /run/rekey/jwt-signer.sock", "rekey-agent jwt-signer --kubeconfig", "ServiceAccountTokens", "--socket-mode string", "--refresh-hint duration", "--trust-consumer string", "--cache-file string", "--allowed-uids", "--allow-abstract-socket"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in\n%s", want, out.String())
		}
	}
	out.Reset()
	root = NewCommand(&out)
	root.SetOut(&out)
	root.SetArgs([]string{"--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "jwt-signer") {
		t.Errorf("rekey-agent --help does not list jwt-signer:\n%s", out.String())
	}
}

// jwt-signer does not start when the default TrustConsumer name cannot be
// told (no host name, one every container shares, or one that does not
// make a valid TrustConsumer name, REVIEW33b finding D): the gate for its
// kube-apiserver would silently be absent, or shared. --trust-consumer=""
// is the explicit way to report nothing.
func TestJWTSignerDefaultConsumerNeedsAHostName(t *testing.T) {
	orig := hostname
	t.Cleanup(func() { hostname = orig })
	missing := filepath.Join(t.TempDir(), "missing")
	for name, tc := range map[string]struct {
		host func() (string, error)
		args []string
		want string
	}{
		"no host name":    {func() (string, error) { return "", errors.New("uname failed") }, nil, `--trust-consumer: the default`},
		"empty host name": {func() (string, error) { return "", nil }, nil, `--trust-consumer: the default`},
		"localhost":       {func() (string, error) { return "localhost", nil }, nil, `--trust-consumer: the default`},
		"underscore":      {func() (string, error) { return "cp_1", nil }, nil, `--trust-consumer: the default, kube-apiserver-jwt.<host name>, cannot be made: the host name "cp_1" gives "kube-apiserver-jwt.cp_1", not a DNS subdomain`},
		"trailing dot":    {func() (string, error) { return "cp-1.example.", nil }, nil, `--trust-consumer: the default, kube-apiserver-jwt.<host name>, cannot be made: the host name "cp-1.example."`},
		"too long": {func() (string, error) {
			return strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 45), nil
		}, nil, `--trust-consumer: the default`},
		"underscore, explicit":    {func() (string, error) { return "cp_1", nil }, []string{"--trust-consumer", "kube-apiserver-jwt.cp-1"}, "--kubeconfig"},
		"underscore, opted out":   {func() (string, error) { return "cp_1", nil }, []string{"--trust-consumer="}, "--kubeconfig"},
		"explicit, not a name":    {func() (string, error) { return "cp-1", nil }, []string{"--trust-consumer", "kube-apiserver-jwt.cp_1"}, `--trust-consumer "kube-apiserver-jwt.cp_1" is not a valid TrustConsumer name`},
		"no host name, explicit":  {func() (string, error) { return "", errors.New("uname failed") }, []string{"--trust-consumer", "kube-apiserver-jwt.cp-1"}, "--kubeconfig"},
		"no host name, opted out": {func() (string, error) { return "", errors.New("uname failed") }, []string{"--trust-consumer="}, "--kubeconfig"},
		"host name":               {func() (string, error) { return "CP-1", nil }, nil, "--kubeconfig"},
	} {
		t.Run(name, func(t *testing.T) {
			hostname = tc.host
			cmd := NewCommand(&bytes.Buffer{})
			cmd.SetOut(&bytes.Buffer{})
			cmd.SetErr(&bytes.Buffer{})
			cmd.SetArgs(append([]string{"jwt-signer", "--kubeconfig", missing, "--certificate-authority", "sa", "--socket", filepath.Join(t.TempDir(), "s.sock")}, tc.args...))
			if err := cmd.ExecuteContext(context.Background()); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
}
