package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The production profile wants TLS or a trusted TLS proxy on a listener off
// loopback, and senders (or an explicit open) on the ingress.
func TestProductionListenerRefusals(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"c.pem", "k.pem", "ca.pem"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cert, key, ca := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem"), filepath.Join(dir, "ca.pem")
	ingress := production + `
ingress:
  listen: "127.0.0.1:0"
  senders: {aodb: {addresses: [10.1.0.0/16], sndr: [AODB]}}
`
	if _, err := load(t, ingress); err != nil {
		t.Fatalf("loopback listeners with a sender: %v", err)
	}
	for _, c := range []struct {
		name, key, fragment string
		env                 []string
	}{
		{"admin in clear", "admin.listen", "over plain HTTP", []string{"MSGX_ADMIN_LISTEN=0.0.0.0:8081"}},
		{"ingress in clear", "ingress.listen", "over plain HTTP", []string{"MSGX_INGRESS_LISTEN=10.0.0.5:8080"}},
		{"ingress without senders", "ingress.senders", "anyone who reaches it", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			yml := ingress
			if c.env == nil {
				yml = production + "ingress: {listen: \"127.0.0.1:0\"}\n"
			}
			_, err := load(t, yml, c.env...)
			wantProblem(t, err, c.key, c.fragment)
		})
	}
	// Accepted: TLS, a trusted proxy, an explicit open.
	for name, yml := range map[string]string{
		"tls": production + `
ingress:
  listen: "0.0.0.0:8080"
  tls: {cert-file: "` + cert + `", key-file: "` + key + `", client-ca-file: "` + ca + `"}
  senders: {aodb: {cert-names: [aodb.example], sndr: [AODB]}}
`,
		"proxy": production + `
ingress:
  listen: "0.0.0.0:8080"
  trusted-proxies: [10.0.5.10, "10.0.6.0/24"]
  senders: {aodb: {token: "0123456789abcdef0123", sndr: [AODB]}}
`,
		"open": production + `
ingress: {listen: "127.0.0.1:0", open: true}
`,
	} {
		if _, err := load(t, yml); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	// The embedded profile lets a plain, open listener through.
	if _, err := load(t, strings.Replace(production, "profile: production", "profile: embedded", 1)+"ingress: {listen: \"0.0.0.0:0\"}\n",
		"MSGX_ADMIN_LISTEN=0.0.0.0:0"); err != nil {
		t.Errorf("embedded: %v", err)
	}
}

// Sender, TLS and proxy settings are checked in every profile.
func TestListenerSettingsChecked(t *testing.T) {
	base := strings.Replace(production, "profile: production", "profile: embedded", 1)
	for _, c := range []struct{ name, yml, key, fragment string }{
		{"no check", `ingress: {listen: "127.0.0.1:0", senders: {a: {sndr: [A]}}}`, "ingress.senders.a", "needs addresses, a token or cert-names"},
		{"negative cap", `ingress: {listen: "127.0.0.1:0", senders: {a: {addresses: [10.0.0.1], sndr: [A], max-per-minute: -1}}}`, "ingress.senders.a.max-per-minute", "negative"},
		{"no sndr", `ingress: {listen: "127.0.0.1:0", senders: {a: {addresses: [10.0.0.1]}}}`, "ingress.senders.a.sndr", "missing"},
		{"bad address", `ingress: {listen: "127.0.0.1:0", senders: {a: {addresses: [10.0.0.0/33], sndr: [A]}}}`, "ingress.senders.a.addresses", "neither"},
		{"short token", `ingress: {listen: "127.0.0.1:0", senders: {a: {token: short, sndr: [A]}}}`, "ingress.senders.a.token", "16 characters"},
		{"shared token", `ingress: {listen: "127.0.0.1:0", senders: {a: {token: "0123456789abcdefX", sndr: [A]}, b: {token: "0123456789abcdefX", sndr: [B]}}}`, "ingress.senders.b.token", "the same as a's"},
		{"cert without CA", `ingress: {listen: "127.0.0.1:0", senders: {a: {cert-names: [a], sndr: [A]}}}`, "ingress.senders.a.cert-names", "client-ca-file"},
		{"open and senders", `ingress: {listen: "127.0.0.1:0", open: true, senders: {a: {addresses: [10.0.0.1], sndr: [A]}}}`, "ingress.open", "either open or senders"},
		{"half a pair", `ingress: {listen: "127.0.0.1:0", tls: {cert-file: /nonexistent.pem}}`, "ingress.tls", "go together"},
		{"missing file", `ingress: {listen: "127.0.0.1:0", tls: {cert-file: /nonexistent.pem, key-file: /nonexistent.key}}`, "ingress.tls.cert-file", "cannot read"},
		{"tls and proxy", `ingress: {listen: "127.0.0.1:0", trusted-proxies: [10.0.0.1], tls: {cert-file: /nonexistent.pem, key-file: /nonexistent.key}}`, "ingress.trusted-proxies", "not both"},
		{"bad proxy", `ingress: {listen: "127.0.0.1:0", trusted-proxies: [proxy.example]}`, "ingress.trusted-proxies", "neither"},
		{"admin client CA", `admin: {listen: "127.0.0.1:0", tls: {client-ca-file: /x}}`, "admin.tls.client-ca-file", "takes no client certificates"},
		{"negative limit", `ingress: {listen: "127.0.0.1:0", limits: {max-conns-per-client: -1, idle-timeout: 0s}}`, "ingress.limits.max-conns-per-client", "negative"},
	} {
		t.Run(c.name, func(t *testing.T) {
			yml := base + c.yml + "\n"
			if strings.HasPrefix(c.yml, "admin:") {
				yml = strings.Replace(base, "admin: {listen: \"127.0.0.1:0\", operator-token: \""+token+"\"}\n", "", 1) + c.yml + "\n"
			}
			_, err := load(t, yml)
			wantProblem(t, err, c.key, c.fragment)
		})
	}
	cfg, err := load(t, base)
	if err != nil {
		t.Fatal(err)
	}
	if l := cfg.Ingress.Limits; l.ReadHeaderTimeout.D().Seconds() != 10 || l.MinBodyRate != 1024 || l.MaxConnsPerClient != 16 || cfg.Admin.Limits != l {
		t.Errorf("default limits: %+v / %+v", l, cfg.Admin.Limits)
	}
}
